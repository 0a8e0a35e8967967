//go:build engine

package docker_test

import (
	"context"
	"fmt"
	"io"
	"testing"

	dcontainer "github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/docker/dockertest"
	"github.com/capct/cluster-api-provider-container/internal/container/runtimetest"
)

// BenchmarkLifecycleSeamVsDirect times create, start, exec `true` and delete
// through the seam and through the same Docker client calls made directly;
// the difference is the seam's overhead.
func BenchmarkLifecycleSeamVsDirect(b *testing.B) {
	rt := dockertest.NewRuntime(b)
	img := testImage(b, rt)
	suffix := runtimetest.RandomSuffix()
	ctx := context.Background()
	netName := "capct-bench-" + suffix
	owner := container.Owner{Namespace: "bench", Cluster: netName, ClusterID: "id-bench-" + suffix}
	if _, err := rt.EnsureNetwork(ctx, container.NetworkSpec{Name: netName, Owner: owner}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ms, _ := container.ListOwned(context.Background(), rt, owner, nil)
		for _, m := range ms {
			_ = rt.Delete(context.Background(), m.Name, owner.ForMachine(m.Labels[container.LabelMachine]))
		}
		_ = rt.DeleteNetwork(context.Background(), netName, owner)
	})
	priv := false

	b.Run("seam", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			name := fmt.Sprintf("%s-seam-%d", netName, i)
			spec := container.MachineSpec{Name: name, Image: img, Network: netName, Role: container.RoleWorker,
				Privileged: &priv, Labels: owner.ForMachine(name).Labels(), Cmd: runtimetest.LoopCmd}
			if _, err := rt.CreateMachine(ctx, spec); err != nil {
				b.Fatal(err)
			}
			if err := rt.Start(ctx, name, owner.ForMachine(name)); err != nil {
				b.Fatal(err)
			}
			if res, err := rt.Exec(ctx, name, owner.ForMachine(name), container.ExecInput{Cmd: []string{"true"}}); err != nil || res.ExitCode != 0 {
				b.Fatal(res, err)
			}
			if err := rt.Delete(ctx, name, owner.ForMachine(name)); err != nil {
				b.Fatal(err)
			}
		}
	})

	b.Run("direct", func(b *testing.B) {
		cli := rt.Client()
		i := 0
		for b.Loop() {
			i++
			name := fmt.Sprintf("%s-direct-%d", netName, i)
			_, err := cli.ContainerCreate(ctx, &dcontainer.Config{Image: img, Cmd: runtimetest.LoopCmd,
				Labels: owner.ForMachine(name).Labels()},
				&dcontainer.HostConfig{NetworkMode: dcontainer.NetworkMode(netName)}, &network.NetworkingConfig{}, nil, name)
			if err != nil {
				b.Fatal(err)
			}
			if err := cli.ContainerStart(ctx, name, dcontainer.StartOptions{}); err != nil {
				b.Fatal(err)
			}
			ex, err := cli.ContainerExecCreate(ctx, name, dcontainer.ExecOptions{Cmd: []string{"true"}, AttachStdout: true, AttachStderr: true})
			if err != nil {
				b.Fatal(err)
			}
			hj, err := cli.ContainerExecAttach(ctx, ex.ID, dcontainer.ExecAttachOptions{})
			if err != nil {
				b.Fatal(err)
			}
			_, _ = stdcopy.StdCopy(io.Discard, io.Discard, hj.Reader)
			hj.Close()
			if ei, err := cli.ContainerExecInspect(ctx, ex.ID); err != nil || ei.ExitCode != 0 {
				b.Fatal(ei, err)
			}
			if err := cli.ContainerRemove(ctx, name, dcontainer.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
