// Images: ImageExists, ImageID and TagImage on the engine's image store,
// and SaveImages and LoadImages, through which images are copied from one
// engine to another (internal/imagecopy).

package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/client"

	"github.com/capct/cluster-api-provider-container/internal/container"
)

// ImageExists implements container.Runtime.
func (r *Runtime) ImageExists(ctx context.Context, ref string) (bool, error) {
	_, err := r.cli.ImageInspect(ctx, ref)
	if err == nil {
		return true, nil
	}
	if cerrdefs.IsNotFound(err) {
		return false, nil
	}
	return false, wrap("inspect", "image", ref, err)
}

// ImageID implements container.Runtime.
func (r *Runtime) ImageID(ctx context.Context, ref string) (string, error) {
	ii, err := r.cli.ImageInspect(ctx, ref)
	if err != nil {
		return "", wrap("inspect", "image", ref, err)
	}
	return ii.ID, nil
}

// TagImage implements container.Runtime. The check and the tag are two
// calls: a tag set by someone else in between is moved, which the caller's
// ImageID afterwards shows.
func (r *Runtime) TagImage(ctx context.Context, id, ref string) error {
	have, err := r.ImageID(ctx, ref)
	switch {
	case err == nil && have == id:
		return nil
	case err == nil:
		return container.NewError("tag", "image", ref, container.KindConflict,
			fmt.Errorf("refusing to move the tag to image %s: it names image %s", id, have))
	case !container.IsNotFound(err):
		return err
	}
	return wrap("tag", "image", ref, r.cli.ImageTag(ctx, id, ref))
}

// SaveImages implements container.Runtime.
func (r *Runtime) SaveImages(ctx context.Context, refs []string) (io.ReadCloser, error) {
	rc, err := r.cli.ImageSave(ctx, refs)
	if err != nil {
		return nil, wrap("save", "images", strings.Join(refs, ","), err)
	}
	return rc, nil
}

// LoadImages implements container.Runtime.
func (r *Runtime) LoadImages(ctx context.Context, tarball io.Reader) error {
	resp, err := r.cli.ImageLoad(ctx, tarball, client.ImageLoadWithQuiet(true))
	if err != nil {
		return wrap("load", "image", "archive", err)
	}
	defer func() { _ = resp.Body.Close() }()
	dec := json.NewDecoder(resp.Body)
	for {
		var msg struct {
			Error       string `json:"error"`
			ErrorDetail *struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&msg); err != nil {
			if err == io.EOF {
				return nil
			}
			return wrap("load", "image", "archive", err)
		}
		if msg.Error != "" {
			return container.NewError("load", "image", "archive", container.KindUnknown, errors.New(msg.Error))
		}
	}
}
