package container

import (
	"context"
	"fmt"
	"strings"
)

// PreloadImages saves the images refs from the engine and imports them into
// the containerd of the node container through
// `ctr --namespace=k8s.io images import -`, so the node does not pull them.
func PreloadImages(ctx context.Context, rt Runtime, container string, owner Owner, refs []string) error {
	if len(refs) == 0 {
		return nil
	}
	tar, err := rt.SaveImages(ctx, refs)
	if err != nil {
		return err
	}
	defer func() { _ = tar.Close() }()
	res, err := rt.Exec(ctx, container, owner, ExecInput{
		Cmd:   []string{"ctr", "--namespace=k8s.io", "images", "import", "--all-platforms", "-"},
		Stdin: tar,
	})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return NewError("preload images into", "container", container, KindUnknown,
			fmt.Errorf("ctr images import of %s exited %d: %s", strings.Join(refs, ", "), res.ExitCode,
				strings.TrimSpace(string(res.Stderr))))
	}
	return nil
}
