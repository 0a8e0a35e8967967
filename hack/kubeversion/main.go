// Command kubeversion prints what a build needs to know of a Kubernetes
// release, from internal/kubeversion, one value a line so that a shell
// script reads it with $(...) or mapfile:
//
//	go run ./hack/kubeversion images v1.36.3      # the images the node image preloads
//	go run ./hack/kubeversion pause-image v1.36.3 # containerd's sandbox image
//	go run ./hack/kubeversion minor v1.36.3       # 36
//
// images/node/build.sh is its user. A version CAPCT does not know, an
// unknown question or a missing argument exits 2 with the reason on stderr.
package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/capct/cluster-api-provider-container/internal/kubeversion"
)

// questions are what the command answers, each for one release.
var questions = []struct {
	name, help string
	answer     func(kubeversion.Release) []string
}{
	{"images", "the images kubeadm runs, as `kubeadm config images list` names them", func(r kubeversion.Release) []string { return r.Images() }},
	{"pause-image", "the pause image (containerd's sandbox image)", func(r kubeversion.Release) []string { return []string{r.PauseImage()} }},
	{"pause", "the pause image's tag", func(r kubeversion.Release) []string { return []string{r.Pause()} }},
	{"etcd", "the etcd image's tag", func(r kubeversion.Release) []string { return []string{r.Etcd()} }},
	{"coredns", "the CoreDNS image's tag", func(r kubeversion.Release) []string { return []string{r.CoreDNS()} }},
	{"minor", "the minor version (the binaries' gitMinor)", func(r kubeversion.Release) []string { return []string{fmt.Sprint(r.Minor())} }},
	{"staging", "the version of the k8s.io staging modules released with it", func(r kubeversion.Release) []string { return []string{r.StagingVersion()} }},
	{"kubeadm-api", "the apiVersion of kubeadm's configuration", func(r kubeversion.Release) []string { return []string{r.KubeadmAPIVersion()} }},
	{"kubelet-config", "the KubeletConfiguration fields CAPCT sets, as YAML", func(r kubeversion.Release) []string {
		var lines []string
		for _, f := range r.KubeletConfiguration() {
			lines = append(lines, f.Name+": "+f.Value)
		}
		return lines
	}},
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run answers args (QUESTION VERSION) on stdout and returns the exit code:
// 2 for bad input, with usage or the reason on stderr.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) != 2 {
		usage(stderr)
		return 2
	}
	for _, q := range questions {
		if q.name != args[0] {
			continue
		}
		r, err := kubeversion.Parse(args[1])
		if err != nil {
			_, _ = fmt.Fprintf(stderr, "kubeversion: %v\n", err)
			return 2
		}
		_, _ = fmt.Fprintln(stdout, strings.Join(q.answer(r), "\n"))
		return 0
	}
	_, _ = fmt.Fprintf(stderr, "kubeversion: unknown question %q\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	_, _ = fmt.Fprintln(w, "usage: go run ./hack/kubeversion QUESTION VERSION   (e.g. images v1.36.3)")
	for _, q := range questions {
		_, _ = fmt.Fprintf(w, "  %-15s %s\n", q.name, q.help)
	}
}
