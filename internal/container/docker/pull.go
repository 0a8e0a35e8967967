// PullImage: the engine pulls an image from its registry (Docker's
// /images/create, which Podman's compatible API serves too), with the
// credentials in the X-Registry-Auth header.

package docker

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"syscall"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/registry"
	"github.com/docker/docker/client"

	"github.com/capct/cluster-api-provider-container/internal/container"
)

// pullMessage is one line of the engine's pull stream: a layer's progress,
// or the error that ended the pull.
type pullMessage struct {
	ID             string `json:"id"`
	Status         string `json:"status"`
	ProgressDetail struct {
		Current int64 `json:"current"`
		Total   int64 `json:"total"`
	} `json:"progressDetail"`
	Error       string `json:"error"`
	ErrorDetail *struct {
		Message string `json:"message"`
	} `json:"errorDetail"`
}

// PullImage implements container.Runtime.
func (r *Runtime) PullImage(ctx context.Context, ref string, opts container.PullOptions) error {
	var pull image.PullOptions
	if a := opts.Auth; a != nil {
		encoded, err := registry.EncodeAuthConfig(registry.AuthConfig{
			Username: a.Username, Password: a.Password, ServerAddress: a.ServerAddress,
			IdentityToken: a.IdentityToken, RegistryToken: a.RegistryToken,
		})
		if err != nil {
			// Not err: it could quote what it failed to encode.
			return container.NewError("pull", "image", ref, container.KindInvalid, errors.New("the registry credentials cannot be encoded"))
		}
		pull.RegistryAuth = encoded
	}
	stream, err := r.cli.ImagePull(ctx, ref, pull)
	if err != nil {
		return pullError(ref, err)
	}
	defer func() { _ = stream.Close() }()
	return readPull(ref, stream, opts.Progress)
}

// readPull follows the pull stream to its end, reporting the bytes fetched
// so far (the sum over layers) whenever they grow. An error in the stream
// is the registry's answer, as the engine relays it.
func readPull(ref string, stream io.Reader, progress func(int64)) error {
	dec := json.NewDecoder(stream)
	// Per layer: bytes fetched, and its size once the engine says it.
	layers, sizes := map[string]int64{}, map[string]int64{}
	var reported int64
	for {
		var msg pullMessage
		if err := dec.Decode(&msg); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return pullError(ref, err)
		}
		if msg.Error != "" || msg.ErrorDetail != nil {
			text := msg.Error
			if text == "" {
				text = msg.ErrorDetail.Message
			}
			kind := container.KindUnknown
			if refusedCredentials(text) {
				kind = container.KindUnauthorized
			}
			return container.NewError("pull", "image", ref, kind, errors.New(text))
		}
		if msg.ID == "" || progress == nil {
			continue
		}
		switch msg.Status {
		case "Downloading":
			layers[msg.ID] = msg.ProgressDetail.Current
			if msg.ProgressDetail.Total > 0 {
				sizes[msg.ID] = msg.ProgressDetail.Total
			}
		case "Download complete":
			// The last "Downloading" may fall short of the layer's end.
			layers[msg.ID] = max(layers[msg.ID], sizes[msg.ID])
		default:
			continue
		}
		var sum int64
		for _, n := range layers {
			sum += n
		}
		if sum > reported {
			reported = sum
			progress(sum)
		}
	}
}

// pullError classifies what the engine said of a pull. Only a failure to
// reach the engine itself is unreachable: the registry's refusals and its
// own unreachability come back as the engine's error responses, which are
// the pull's failure, not the engine's.
func pullError(ref string, err error) error {
	kind := container.KindUnknown
	switch {
	case client.IsErrConnectionFailed(err), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ENOENT):
		kind = container.KindUnreachable
	case cerrdefs.IsNotFound(err):
		kind = container.KindNotFound
	case cerrdefs.IsUnauthorized(err) || refusedCredentials(err.Error()):
		kind = container.KindUnauthorized
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.ErrUnexpectedEOF):
		kind = container.KindTransient
	case cerrdefs.IsInvalidArgument(err):
		kind = container.KindInvalid
	}
	return container.NewError("pull", "image", ref, kind, err)
}

// refusedCredentials recognises a registry's 401 as the engine relays it:
// Docker 20.10 answers a pull the registry refused with a 500 whose message
// is the registry's ("unauthorized: authentication required"), or its own
// when it had no credentials to answer the challenge with.
func refusedCredentials(msg string) bool {
	m := strings.ToLower(msg)
	return strings.Contains(m, "unauthorized") || strings.Contains(m, "no basic auth credentials") ||
		strings.Contains(m, "authentication required")
}
