package machineprovider

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	fakeruntime "github.com/capct/cluster-api-provider-container/internal/container/fake"
	"github.com/capct/cluster-api-provider-container/internal/engines"
	"github.com/capct/cluster-api-provider-container/internal/imagecopy"
)

// pullEnv is a machine on the manager's own engine (rt) whose images may
// be pulled, and the provider over it, with the pull Secret in objs.
type pullEnv struct {
	claim  *Claim
	p      *Provider
	at     Placement
	woken  chan types.NamespacedName
	secret *corev1.Secret
}

// dockerConfigSecret is a kubernetes.io/dockerconfigjson Secret of ns with
// one entry, host's user and password.
func dockerConfigSecret(ns, name, host, user, password string) *corev1.Secret {
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: fmt.Appendf(nil, `{"auths":{%q:{"auth":%q}}}`, host, auth)},
	}
}

// newPullEnv returns a worker of cluster ns/c1 on rt, the manager's own
// engine, whose ContainerCluster names the Secret pull-secret; secret,
// when not nil, is that Secret.
func newPullEnv(t *testing.T, rt container.Runtime, secret *corev1.Secret) *pullEnv {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clusterv1.AddToScheme, infrav1.AddToScheme, corev1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	cm := &infrav1.ContainerMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w-0",
		Labels: map[string]string{clusterv1.ClusterNameLabel: "c1"}}}
	cc := &infrav1.ContainerCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1"},
		Spec: infrav1.ContainerClusterSpec{ClusterID: "id-1", ImagePullSecretRef: &infrav1.LocalObjectReference{Name: "pull-secret"}}}
	objs := []client.Object{cm}
	if secret != nil {
		objs = append(objs, secret)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
	set := engines.Single(rt)
	woken := make(chan types.NamespacedName, 8)
	e := &pullEnv{
		claim: &Claim{
			Cluster:          &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1", UID: "uid-1"}},
			ContainerCluster: cc,
			Machine:          &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m-0"}},
			ContainerMachine: cm,
			Version:          "v1.35.4",
		},
		p: &Provider{Client: c, APIReader: c, Engines: set,
			Images: imagecopy.New(t.Context(), set, 0, func(k types.NamespacedName) { woken <- k }, nil)},
		at:     Placement{Engine: engines.Local, Runtime: rt},
		woken:  woken,
		secret: secret,
	}
	return e
}

// check runs the provider's host check of the machine's images, image
// being its node image.
func (e *pullEnv) check(t *testing.T, image string) error {
	t.Helper()
	return e.p.checkHost(context.Background(), e.claim, e.at, image)
}

// waitWoken waits for the machine to be woken by the end of a pull.
func (e *pullEnv) waitWoken(t *testing.T) {
	t.Helper()
	select {
	case <-e.woken:
	case <-time.After(10 * time.Second):
		t.Fatal("the machine was not woken when the pull ended")
	}
}

// wantWait fails unless err is a *WaitError of reason whose message has
// each of texts, and returns the message.
func wantWait(t *testing.T, err error, reason string, texts ...string) string {
	t.Helper()
	wait, ok := AsWait(err)
	if !ok || wait.Reason != reason {
		t.Fatalf("the host check = %v; want a WaitError %s", err, reason)
	}
	for _, text := range texts {
		if !strings.Contains(wait.Message, text) {
			t.Errorf("the %s message does not say %q: %s", reason, text, wait.Message)
		}
	}
	if wait.RequeueAfter == 0 {
		t.Errorf("a %s wait looks again only when woken", reason)
	}
	return wait.Message
}

// TestPullPolicies: what each pull policy does with the node image and a
// preloaded image that the engine lacks, or holds.
func TestPullPolicies(t *testing.T) {
	const node, preload = "registry.test/capct/node:v1.35.4", "registry.test/app:v1"
	for _, tc := range []struct {
		name   string
		policy infrav1.ImagePullPolicy
		// held are on the engine before the check.
		held       []string
		wantPulls  []string
		wantReason string
	}{
		{name: "the default pulls each missing image", wantPulls: []string{node, preload}},
		{name: "IfNotPresent pulls only what is missing", policy: infrav1.ImagePullIfNotPresent, held: []string{node}, wantPulls: []string{preload}},
		{name: "IfNotPresent does not pull a present image", policy: infrav1.ImagePullIfNotPresent, held: []string{node, preload}},
		{name: "Never does not pull", policy: infrav1.ImagePullNever, held: []string{node}, wantReason: infrav1.ImageNotOnHostReason},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := fakeruntime.New(nil)
			rt.AddRegistryImage(node, []byte("node"))
			rt.AddRegistryImage(preload, []byte("app"))
			for _, ref := range tc.held {
				rt.AddImage(ref, []byte("held "+ref))
			}
			e := newPullEnv(t, rt, nil)
			e.claim.ContainerCluster.Spec.ImagePullSecretRef = nil
			e.claim.ContainerMachine.Spec.ImagePullPolicy = tc.policy
			e.claim.ContainerMachine.Spec.PreLoadImages = []string{preload}
			// One image at a time: each pull is a wait, and its end wakes
			// the machine.
			for range tc.wantPulls {
				wantWait(t, e.check(t, node), infrav1.PullingImageReason, "pulling image", "from its registry")
				e.waitWoken(t)
			}
			err := e.check(t, node)
			if tc.wantReason != "" {
				wantWait(t, err, tc.wantReason, `spec.preLoadImages[0]: image "registry.test/app:v1"`, "spec.imagePullPolicy is Never")
			} else if err != nil {
				t.Fatalf("after the pulls the host check = %v; want none", err)
			}
			if got := rt.PullCalls(); !slices.Equal(got, tc.wantPulls) {
				t.Fatalf("pulled %v; want %v", got, tc.wantPulls)
			}
		})
	}
}

// TestPullCredentialsComeFromTheClustersSecret: the engine presents the
// Secret's credentials for the image's registry; wrong ones end in
// ImagePullFailed naming the image and the registry's 401, and never the
// password, and a Secret that is missing or of another type is named.
func TestPullCredentialsComeFromTheClustersSecret(t *testing.T) {
	const image = "private.test:5000/team/node:v1"
	for _, tc := range []struct {
		name       string
		secret     *corev1.Secret
		wantReason string
		wantTexts  []string
	}{
		{name: "the right ones", secret: dockerConfigSecret("ns", "pull-secret", "private.test:5000", "capct", "s3cret")},
		{name: "an entry of another registry only", secret: dockerConfigSecret("ns", "pull-secret", "other.test", "capct", "s3cret"),
			wantReason: infrav1.ImagePullFailedReason, wantTexts: []string{"spec.image", image, "401 Unauthorized", "no basic auth credentials"}},
		{name: "a wrong password", secret: dockerConfigSecret("ns", "pull-secret", "https://private.test:5000/v2/", "capct", "wrong-one"),
			wantReason: infrav1.ImagePullFailedReason, wantTexts: []string{"spec.image", image, "401 Unauthorized", "unauthorized: authentication required"}},
		{name: "no Secret", wantReason: infrav1.ImagePullFailedReason, wantTexts: []string{"spec.imagePullSecretRef", "ns/pull-secret", "not found"}},
		{name: "a Secret of another type", secret: func() *corev1.Secret {
			s := dockerConfigSecret("ns", "pull-secret", "private.test:5000", "capct", "s3cret")
			s.Type = corev1.SecretTypeOpaque
			return s
		}(), wantReason: infrav1.ImagePullFailedReason, wantTexts: []string{"ns/pull-secret", string(corev1.SecretTypeDockerConfigJson)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := fakeruntime.New(nil)
			rt.AddRegistryImage(image, []byte("node"))
			rt.RequireRegistryLogin("private.test:5000", "capct", "s3cret")
			e := newPullEnv(t, rt, tc.secret)
			err := e.check(t, image)
			if tc.secret != nil && tc.secret.Type == corev1.SecretTypeDockerConfigJson {
				wantWait(t, err, infrav1.PullingImageReason, image)
				e.waitWoken(t)
				err = e.check(t, image)
			}
			if tc.wantReason == "" {
				if err != nil {
					t.Fatalf("after the pull the host check = %v; want none", err)
				}
				return
			}
			msg := wantWait(t, err, tc.wantReason, tc.wantTexts...)
			for _, secret := range []string{"s3cret", "wrong-one", base64.StdEncoding.EncodeToString([]byte("capct:wrong-one"))} {
				if strings.Contains(msg, secret) {
					t.Fatalf("the message shows the credentials: %s", msg)
				}
			}
			// The failure stands until its backoff ends: no new pull.
			pulls := len(rt.PullCalls())
			wantWait(t, e.check(t, image), tc.wantReason)
			if len(rt.PullCalls()) != pulls {
				t.Fatal("a failed pull was tried again at once")
			}
		})
	}
}

// TestPullOnAContainerEngineComesAfterTheCopy: on a ContainerEngine an
// image another engine of the cluster holds is copied from it, so that the
// cluster runs one image; only an image none holds is pulled.
func TestPullOnAContainerEngineComesAfterTheCopy(t *testing.T) {
	const held, pulled = "registry.test/capct/node:v1.35.4", "registry.test/app:v1"
	local, target := fakeruntime.New(nil), fakeruntime.New(nil)
	local.AddImage(held, []byte("node"))
	target.AddRegistryImage(held, []byte("another node image under the tag"))
	target.AddRegistryImage(pulled, []byte("app"))
	set := engines.Named(map[string]container.Runtime{engines.Local: local, "engine-b": target})
	e := newPullEnv(t, target, nil)
	e.claim.ContainerCluster.Spec.ImagePullSecretRef = nil
	e.claim.ContainerCluster.Spec.Engines = []infrav1.ClusterEngine{{Name: "engine-b"}}
	e.claim.ContainerMachine.Spec.PreLoadImages = []string{pulled}
	e.p.Engines = set
	e.p.Images = imagecopy.New(t.Context(), set, 0, func(k types.NamespacedName) { e.woken <- k }, nil)
	e.at = Placement{Engine: "engine-b", Runtime: target}

	wantWait(t, e.check(t, held), infrav1.CopyingImageReason, held)
	e.waitWoken(t)
	// The preloaded image: a copy is looked for first, then it is pulled.
	wantWait(t, e.check(t, held), infrav1.CopyingImageReason, pulled)
	e.waitWoken(t)
	wantWait(t, e.check(t, held), infrav1.PullingImageReason, pulled, "engine-b")
	e.waitWoken(t)
	if err := e.check(t, held); err != nil {
		t.Fatalf("after the copy and the pull the host check = %v; want none", err)
	}
	if got := target.PullCalls(); !slices.Equal(got, []string{pulled}) {
		t.Fatalf("pulled %v; want only %s, which no engine held", got, pulled)
	}
	if id, _ := target.ImageID(context.Background(), held); id != fakeruntime.ImageIDOf([]byte("node")) {
		t.Fatalf("engine-b has %s under %s, not the manager's engine's image", id, held)
	}
}
