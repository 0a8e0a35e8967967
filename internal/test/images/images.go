// Package images gives tests the images that CAPCT builds itself, through
// the project's own build script, because no registry can be reached to
// pull them.
package images

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// LoadBalancer builds (or finds cached) capct/haproxy with
// hack/node-image/build-node-image.sh and returns its reference.
func LoadBalancer() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("failed to locate the images package source")
	}
	script := filepath.Join(filepath.Dir(file), "..", "..", "..", "hack", "node-image", "build-node-image.sh")
	cmd := exec.Command(script, "lb")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("failed to build the load balancer image with %s: %w", script, err)
	}
	fields := strings.Fields(string(out))
	if len(fields) == 0 {
		return "", fmt.Errorf("%s printed no image name", script)
	}
	return fields[len(fields)-1], nil
}
