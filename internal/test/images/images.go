// Package images gives tests the images that CAPCT builds itself, through
// the project's own build script, because no registry can be reached to
// pull them.
package images

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/capct/cluster-api-provider-container/internal/container/docker"
	"github.com/capct/cluster-api-provider-container/internal/container/docker/dockertest"
)

// LoadBalancer builds (or finds cached) capct/haproxy with
// images/haproxy/build.sh and returns its reference.
func LoadBalancer() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("failed to locate the images package source")
	}
	script := filepath.Join(filepath.Dir(file), "..", "..", "..", "images", "haproxy", "build.sh")
	cmd := exec.Command(script)
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

// Docker is what a controller suite on the real engine needs: the runtime,
// a busybox node image (bootstrap data runs, no kubelet starts) and the
// load balancer image.
type Docker struct {
	Runtime   *docker.Runtime
	NodeImage string
	LBImage   string
}

// NewDocker connects to the engine and builds (or finds cached) both images.
func NewDocker(ctx context.Context) (Docker, error) {
	rt, err := docker.New()
	if err != nil {
		return Docker{}, err
	}
	d := Docker{Runtime: rt}
	if d.NodeImage, err = dockertest.BusyboxImage(ctx, rt); err != nil {
		return Docker{}, err
	}
	if d.LBImage, err = LoadBalancer(); err != nil {
		return Docker{}, err
	}
	return d, nil
}
