// Images: an in-memory image store, whose IDs derive from each image's
// bytes as the engine's do.

package fake

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/capct/cluster-api-provider-container/internal/container"
)

// AddImage makes ref exist with content as its saved form.
func (r *Runtime) AddImage(ref string, content []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tagLocked(ref, content)
}

// ImageIDOf is the ID the fake gives an image of content, as the engine
// derives it from the image's bytes.
func ImageIDOf(content []byte) string {
	sum := sha256.Sum256(content)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// tagLocked stores content and tags it as ref, unless ref is an ID: as
// the engine does, the fake derives an image's ID from its bytes, never
// from what an archive calls it.
func (r *Runtime) tagLocked(ref string, content []byte) {
	r.blobs[ImageIDOf(content)] = bytes.Clone(content)
	if !strings.HasPrefix(ref, "sha256:") {
		r.images[ref] = ImageIDOf(content)
	}
}

// imageLocked resolves ref, a tag or an ID, to the image's ID.
func (r *Runtime) imageLocked(ref string) (string, bool) {
	if id, ok := r.images[ref]; ok {
		return id, true
	}
	_, ok := r.blobs[ref]
	return ref, ok
}

// ImageExists implements container.Runtime.
func (r *Runtime) ImageExists(ctx context.Context, ref string) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failure(OpImageExists); err != nil {
		return false, err
	}
	_, ok := r.imageLocked(ref)
	return ok, nil
}

// ImageID implements container.Runtime.
func (r *Runtime) ImageID(ctx context.Context, ref string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failure(OpImageID); err != nil {
		return "", err
	}
	id, ok := r.imageLocked(ref)
	if !ok {
		return "", notFound("inspect", "image", ref)
	}
	return id, nil
}

// TagImage implements container.Runtime.
func (r *Runtime) TagImage(ctx context.Context, id, ref string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failure(OpTagImage); err != nil {
		return err
	}
	if _, ok := r.blobs[id]; !ok {
		return notFound("tag", "image", id)
	}
	if have, ok := r.images[ref]; ok && have != id {
		return container.NewError("tag", "image", ref, container.KindConflict,
			fmt.Errorf("refusing to move the tag to image %s: it names image %s", id, have))
	}
	r.images[ref] = id
	return nil
}

// SaveImages implements container.Runtime: the tar holds one file per image,
// named after its reference or ID, with the bytes given to AddImage.
func (r *Runtime) SaveImages(ctx context.Context, refs []string) (io.ReadCloser, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failure(OpSaveImages); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, ref := range refs {
		id, ok := r.imageLocked(ref)
		if !ok {
			return nil, notFound("save", "image", ref)
		}
		b := r.blobs[id]
		_ = tw.WriteHeader(&tar.Header{Name: ref, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg})
		_, _ = tw.Write(b)
	}
	_ = tw.Close()
	return io.NopCloser(&buf), nil
}

// LoadImages implements container.Runtime: it reads a tar made by
// SaveImages, each file an image named after its reference.
func (r *Runtime) LoadImages(ctx context.Context, in io.Reader) error {
	tr := tar.NewReader(in)
	loaded := map[string][]byte{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return container.NewError("load", "image", "archive", container.KindInvalid, err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return container.NewError("load", "image", "archive", container.KindInvalid, err)
		}
		loaded[h.Name] = b
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failure(OpLoadImages); err != nil {
		return err
	}
	for ref, b := range loaded {
		r.tagLocked(ref, b)
	}
	return nil
}
