package policy

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
)

// ImageExistsFunc reports whether the container host holds the image ref;
// container.Runtime's ImageExists is one.
type ImageExistsFunc func(ctx context.Context, ref string) (bool, error)

// FieldValue is a value of an object's field that only the host can judge.
type FieldValue struct {
	Field *field.Path
	Value string
}

// MachineImages lists the images a machine needs on the host: its node image
// (spec.image, or image when that is empty) and each preloaded image.
func MachineImages(spec *infrav1.ContainerMachineSpec, image string) []FieldValue {
	if spec.Image != "" {
		image = spec.Image
	}
	out := []FieldValue{{Field: field.NewPath("spec", "image"), Value: image}}
	for i, ref := range spec.PreLoadImages {
		out = append(out, FieldValue{Field: field.NewPath("spec", "preLoadImages").Index(i), Value: ref})
	}
	return out
}

// NotOnHostError names the fields whose images the container host does not
// hold. Where the pull policy allows, CAPCT pulls them
// (internal/imagecopy); otherwise such a machine cannot launch until
// someone loads the images or changes the fields. It is not final,
// because loading them is enough.
type NotOnHostError struct {
	Missing []FieldValue
}

func (e *NotOnHostError) Error() string {
	parts := make([]string, 0, len(e.Missing))
	for _, m := range e.Missing {
		parts = append(parts, fmt.Sprintf("%s: image %q", m.Field, m.Value))
	}
	return fmt.Sprintf("not on the container host (load them there, e.g. with docker load, let CAPCT pull them, or change the fields): %s",
		strings.Join(parts, ", "))
}

// MissingImages asks the host for each image and returns a *NotOnHostError
// naming every field whose image is missing, or the first error the host
// returned.
func MissingImages(ctx context.Context, exists ImageExistsFunc, images []FieldValue) error {
	var missing []FieldValue
	for _, img := range images {
		ok, err := exists(ctx, img.Value)
		if err != nil {
			return fmt.Errorf("failed to look for image %q of %s on the container host: %w", img.Value, img.Field, err)
		}
		if !ok {
			missing = append(missing, img)
		}
	}
	if len(missing) > 0 {
		return &NotOnHostError{Missing: missing}
	}
	return nil
}
