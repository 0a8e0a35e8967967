package kubeversion

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestTableMatchesKubeadm reads the facts of the table again from the
// sources of every k8s.io/kubernetes release in the Go module cache whose
// minor the table has: kubeadm's constants.go (etcd, CoreDNS, pause), its
// configuration API's scheme and defaults (API version, image registry),
// and the kubelet's KubeletConfiguration (the fields CAPCT sets). The
// release hack/tools/kubernetes pins must be among them, so that the test
// never passes having checked nothing; it logs what it checked. Another
// release is checked once its module is in the cache (`go mod download
// k8s.io/kubernetes@v1.37.2`).
func TestTableMatchesKubeadm(t *testing.T) {
	modcache := goEnv(t, "GOMODCACHE")
	pinned := pinnedKubernetes(t)
	dirs, err := filepath.Glob(filepath.Join(modcache, "k8s.io", "kubernetes@v1.*"))
	if err != nil {
		t.Fatal(err)
	}
	var checked []string
	for _, dir := range dirs {
		version := strings.TrimPrefix(filepath.Base(dir), "kubernetes@")
		r, err := Parse(version)
		if err != nil {
			t.Logf("not checked: k8s.io/kubernetes %s: %v", version, err)
			continue
		}
		t.Run(version, func(t *testing.T) { checkRelease(t, r, dir) })
		checked = append(checked, version)
	}
	if !slices.Contains(checked, pinned) {
		t.Fatalf("k8s.io/kubernetes %s, hack/tools/kubernetes's pin, is not in the module cache %s: run `cd hack/tools/kubernetes && go mod download k8s.io/kubernetes`", pinned, modcache)
	}
	t.Logf("checked the table against the sources of k8s.io/kubernetes %s", strings.Join(checked, ", "))
	var unchecked []string
	for m := range minors {
		if !slices.ContainsFunc(checked, func(v string) bool { return strings.HasPrefix(v, fmt.Sprintf("v1.%d.", m)) }) {
			unchecked = append(unchecked, fmt.Sprintf("1.%d", m))
		}
	}
	if len(unchecked) > 0 {
		slices.Sort(unchecked)
		t.Logf("no release of minor %s is in the module cache: its row was not checked", strings.Join(unchecked, ", "))
	}
}

// checkRelease compares what the table says of r with the sources of r in
// dir, the k8s.io/kubernetes module of that release.
func checkRelease(t *testing.T, r Release, dir string) {
	kubeadm := filepath.Join(dir, "cmd", "kubeadm", "app")

	consts := parseGo(t, filepath.Join(kubeadm, "constants", "constants.go"))
	etcdMap := supportedEtcd(t, consts, r.Minor())
	etcd := etcdFor(t, etcdMap, r.Minor())
	for _, c := range []struct{ what, got, want string }{
		{"Etcd (SupportedEtcdVersion[minor])", r.Etcd(), etcd},
		{"CoreDNS (CoreDNSVersion)", r.CoreDNS(), stringValue(t, consts, "CoreDNSVersion")},
		{"Pause (PauseVersion)", r.Pause(), stringValue(t, consts, "PauseVersion")},
	} {
		if c.got != c.want {
			t.Errorf("%s: the table has %q, kubeadm %s's constants.go %q: update the table", c.what, c.got, r, c.want)
		}
	}

	// The API version kubeadm prefers is the first of SetVersionPriority;
	// its group and version are in that package's register.go.
	scheme := parseGo(t, filepath.Join(kubeadm, "apis", "kubeadm", "scheme", "scheme.go"))
	apiPkg := preferredAPIPackage(t, scheme)
	apiDir := filepath.Join(dir, strings.TrimPrefix(apiPkg, "k8s.io/kubernetes/"))
	register, err := os.ReadFile(filepath.Join(apiDir, "register.go"))
	if err != nil {
		t.Fatal(err)
	}
	group := submatch(t, register, `const GroupName = "([^"]+)"`, "register.go's GroupName")
	version := submatch(t, register, `Version: "([^"]+)"`, "register.go's SchemeGroupVersion")
	if got, want := r.KubeadmAPIVersion(), group+"/"+version; got != want {
		t.Errorf("KubeadmAPIVersion: the table has %q, kubeadm %s prefers %q (%s): update the table", got, r, want, apiPkg)
	}

	// Every image is in the registry kubeadm's configuration defaults to.
	defaults, err := os.ReadFile(filepath.Join(apiDir, "defaults.go"))
	if err != nil {
		t.Fatal(err)
	}
	repo := submatch(t, defaults, `DefaultImageRepository = "([^"]+)"`, "defaults.go's DefaultImageRepository")
	for _, img := range r.Images() {
		if !strings.HasPrefix(img, repo+"/") {
			t.Errorf("image %s is not in kubeadm %s's DefaultImageRepository %s", img, r, repo)
		}
	}

	// Each KubeletConfiguration field CAPCT sets exists in this release's
	// kubelet (the internal type: the versioned one lives in the
	// k8s.io/kubelet module, and converts field for field).
	fields := structFields(t, parseGo(t, filepath.Join(dir, "pkg", "kubelet", "apis", "config", "types.go")), "KubeletConfiguration")
	for _, f := range r.KubeletConfiguration() {
		goName := strings.ToUpper(f.Name[:1]) + f.Name[1:]
		if !slices.Contains(fields, goName) {
			t.Errorf("the kubelet of %s has no KubeletConfiguration field %s (%s)", r, f.Name, goName)
		}
	}
}

// etcdFor is the etcd tag kubeadm's EtcdSupportedVersion picks for a
// minor: its own entry or, when the map has none (kubeadm v1.37.2's lists
// only 34 to 36), the entry of the nearest minor.
func etcdFor(t *testing.T, supported map[uint64]string, minor uint64) string {
	t.Helper()
	if tag, ok := supported[minor]; ok {
		return tag
	}
	if len(supported) == 0 {
		t.Fatal("constants.go's SupportedEtcdVersion is empty")
	}
	keys := slices.Sorted(maps.Keys(supported))
	nearest := keys[0]
	if minor > keys[len(keys)-1] {
		nearest = keys[len(keys)-1]
	}
	t.Logf("SupportedEtcdVersion has no minor %d: kubeadm falls back to minor %d's %s", minor, nearest, supported[nearest])
	return supported[nearest]
}

// goEnv is `go env NAME`.
func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		t.Fatalf("go env %s: %v", name, err)
	}
	v := strings.TrimSpace(string(out))
	if v == "" {
		t.Fatalf("go env %s is empty", name)
	}
	return v
}

// pinnedKubernetes is the version of k8s.io/kubernetes that
// hack/tools/kubernetes/go.mod requires.
func pinnedKubernetes(t *testing.T) string {
	t.Helper()
	const gomod = "../../hack/tools/kubernetes/go.mod"
	f, err := os.Open(gomod)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	require := regexp.MustCompile(`^\s*(?:require\s+)?k8s\.io/kubernetes\s+(v\S+)`)
	s := bufio.NewScanner(f)
	for s.Scan() {
		if m := require.FindStringSubmatch(s.Text()); m != nil {
			return m[1]
		}
	}
	t.Fatalf("%s requires no k8s.io/kubernetes (%v)", gomod, s.Err())
	return ""
}

func parseGo(t *testing.T, file string) *ast.File {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatalf("failed to parse %s: %v", file, err)
	}
	return f
}

// valueOf is the expression a top-level const or var named name is set to.
func valueOf(t *testing.T, f *ast.File, name string) ast.Expr {
	t.Helper()
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok {
			continue
		}
		for _, s := range g.Specs {
			v, ok := s.(*ast.ValueSpec)
			if !ok {
				continue
			}
			for i, n := range v.Names {
				if n.Name == name && i < len(v.Values) {
					return v.Values[i]
				}
			}
		}
	}
	t.Fatalf("%s is not set in %s", name, f.Name.Name)
	return nil
}

// stringValue is a top-level string constant's value.
func stringValue(t *testing.T, f *ast.File, name string) string {
	t.Helper()
	lit, ok := valueOf(t, f, name).(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		t.Fatalf("%s is not a string literal", name)
	}
	s, err := strconv.Unquote(lit.Value)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// supportedEtcd evaluates constants.go's SupportedEtcdVersion map, whose
// keys are minors, either literal or uint8(getSkewedKubernetesVersion(n).Minor()):
// the minor n away from kubeadm's own, which is the release's.
func supportedEtcd(t *testing.T, f *ast.File, minor uint64) map[uint64]string {
	t.Helper()
	lit, ok := valueOf(t, f, "SupportedEtcdVersion").(*ast.CompositeLit)
	if !ok {
		t.Fatal("SupportedEtcdVersion is not a map literal")
	}
	m := map[uint64]string{}
	for _, e := range lit.Elts {
		kv, ok := e.(*ast.KeyValueExpr)
		if !ok {
			t.Fatalf("SupportedEtcdVersion has an element that is not key: value")
		}
		val, ok := kv.Value.(*ast.BasicLit)
		if !ok || val.Kind != token.STRING {
			t.Fatalf("SupportedEtcdVersion has a value that is not a string literal")
		}
		tag, err := strconv.Unquote(val.Value)
		if err != nil {
			t.Fatal(err)
		}
		m[etcdKey(t, kv.Key, minor)] = tag
	}
	return m
}

func etcdKey(t *testing.T, key ast.Expr, minor uint64) uint64 {
	t.Helper()
	if lit, ok := key.(*ast.BasicLit); ok && lit.Kind == token.INT {
		n, err := strconv.ParseUint(lit.Value, 10, 8)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// uint8(getSkewedKubernetesVersion(N).Minor())
	if conv, ok := key.(*ast.CallExpr); ok && isIdent(conv.Fun, "uint8") && len(conv.Args) == 1 {
		if minorCall, ok := conv.Args[0].(*ast.CallExpr); ok {
			if sel, ok := minorCall.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Minor" {
				if skew, ok := sel.X.(*ast.CallExpr); ok && isIdent(skew.Fun, "getSkewedKubernetesVersion") && len(skew.Args) == 1 {
					n := intLiteral(t, skew.Args[0])
					return uint64(int64(minor) + n)
				}
			}
		}
	}
	t.Fatalf("SupportedEtcdVersion has a key this test cannot evaluate: %#v", key)
	return 0
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

// intLiteral is N or -N.
func intLiteral(t *testing.T, e ast.Expr) int64 {
	t.Helper()
	sign := int64(1)
	if u, ok := e.(*ast.UnaryExpr); ok && u.Op == token.SUB {
		sign, e = -1, u.X
	}
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.INT {
		t.Fatalf("not an integer literal: %#v", e)
	}
	n, err := strconv.ParseInt(lit.Value, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return sign * n
}

// preferredAPIPackage is the import path of the package whose
// SchemeGroupVersion scheme.go's SetVersionPriority names first.
func preferredAPIPackage(t *testing.T, f *ast.File) string {
	t.Helper()
	var first string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || first != "" {
			return first == ""
		}
		if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "SetVersionPriority" && len(call.Args) > 0 {
			if arg, ok := call.Args[0].(*ast.SelectorExpr); ok && arg.Sel.Name == "SchemeGroupVersion" {
				if id, ok := arg.X.(*ast.Ident); ok {
					first = id.Name
				}
			}
		}
		return true
	})
	if first == "" {
		t.Fatal("scheme.go calls no SetVersionPriority(<package>.SchemeGroupVersion, ...)")
	}
	for _, imp := range f.Imports {
		p, err := strconv.Unquote(imp.Path.Value)
		if err != nil {
			t.Fatal(err)
		}
		name := path.Base(p)
		if imp.Name != nil {
			name = imp.Name.Name
		}
		if name == first {
			return p
		}
	}
	t.Fatalf("scheme.go does not import %s", first)
	return ""
}

// structFields are the names of a top-level struct type's fields.
func structFields(t *testing.T, f *ast.File, typeName string) []string {
	t.Helper()
	var names []string
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok || ts.Name.Name != typeName {
			return true
		}
		st, ok := ts.Type.(*ast.StructType)
		if !ok {
			t.Fatalf("%s is not a struct", typeName)
		}
		for _, fld := range st.Fields.List {
			for _, n := range fld.Names {
				names = append(names, n.Name)
			}
		}
		return false
	})
	if len(names) == 0 {
		t.Fatalf("no struct %s", typeName)
	}
	return names
}

func submatch(t *testing.T, src []byte, re, what string) string {
	t.Helper()
	m := regexp.MustCompile(re).FindSubmatch(src)
	if m == nil {
		t.Fatalf("%s not found (%s)", what, re)
	}
	return string(m[1])
}
