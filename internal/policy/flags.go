package policy

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
)

// AllowAll is the value of a list flag that allows everything, as leaving
// the flag out does. The manifest always passes the flags, with the values
// of clusterctl variables, and a variable cannot leave a flag out.
const AllowAll = "*"

// AddFlags binds the policy's manager flags to p. A list flag that is not
// given, or given as AllowAll, leaves its list nil (everything allowed);
// given otherwise, even as an empty string, it allows only what it lists.
func (p *Policy) AddFlags(fs *pflag.FlagSet) {
	fs.Var(&listFlag{list: &p.HostPathPrefixes}, FlagAllowedHostPathPrefixes,
		"Comma-separated host paths that extraMounts may bind, each with what lies below it (e.g. /srv/capct). "+
			"Unset or * allows every path; an empty value forbids extraMounts.")
	fs.Var(&listFlag{list: &p.AllowedNetworks}, FlagAllowedNetworks,
		fmt.Sprintf("Comma-separated names of existing networks that Unmanaged clusters may join (e.g. capct-mgmt). "+
			"Unset or * allows every network but %s, which are allowed only when listed here; an empty value allows none.",
			strings.Join(ReservedNetworks, ", ")))
	fs.Var(&listFlag{list: &p.ImagePrefixes}, FlagAllowedImagePrefixes,
		"Comma-separated prefixes of the images that nodes, load balancers and preloads may use (e.g. capct/,kindest/). "+
			"Unset or * allows every image; an empty value allows none.")
	fs.IntVar(&p.MaxMachinesPerCluster, FlagMaxMachinesPerCluster, DefaultMaxMachinesPerCluster,
		"Most ContainerMachines one cluster may have, counting every MachineDeployment, control plane and pool. 0 means no cap.")
	p.HostListenAddresses = slices.Clone(DefaultHostListenAddresses)
	fs.Var(&addressListFlag{list: &p.HostListenAddresses}, FlagAllowedHostListenAddresses,
		"Comma-separated host addresses that machines' extraPortMappings and load balancers may publish ports on (e.g. 127.0.0.1,::1,192.0.2.10). "+
			"Defaults to the loopback addresses, which only the host reaches; 0.0.0.0 or :: opens the host's every interface of that family. "+
			"* allows every address; an empty value allows none (a load balancer's default 127.0.0.1 stays allowed).")
	fs.IntVar(&p.MinHostPort, FlagMinHostPort, DefaultMinHostPort,
		"Lowest host port that machines' extraPortMappings may publish; the ports below 1024 are the host's own services'. 1 allows every port.")
	fs.Var(&localNamespacesFlag{p: p}, FlagLocalEngineAllowedNamespaces,
		"Comma-separated namespaces whose ContainerClusters may run on the manager's own engine (those that list no spec.engines); "+
			"a namespace that --"+FlagLocalEngineNamespaceSelector+" selects may too. Unset, empty or * is as if not given; "+
			"with neither flag given every namespace may.")
	fs.Var(&localSelectorFlag{p: p}, FlagLocalEngineNamespaceSelector,
		"Label selector (e.g. capct.io/local-engine=allowed) of the namespaces whose ContainerClusters may run on the manager's own engine, "+
			"beside those --"+FlagLocalEngineAllowedNamespaces+" lists. Unset, empty or * is as if not given. "+
			"A selector no namespace matches keeps every cluster that lists no engines off the manager's host.")
}

// listFlag is a comma-separated list that tells "not given" (nil) from
// "given empty" (an empty list).
type listFlag struct {
	list *[]string
}

func (f *listFlag) String() string {
	if f.list == nil || *f.list == nil {
		return ""
	}
	return strings.Join(*f.list, ",")
}

// Set appends, so that the flag may also be repeated.
func (f *listFlag) Set(value string) error {
	if strings.TrimSpace(value) == AllowAll {
		*f.list = nil
		return nil
	}
	if *f.list == nil {
		*f.list = []string{}
	}
	for _, v := range strings.Split(value, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*f.list = append(*f.list, v)
		}
	}
	return nil
}

func (f *listFlag) Type() string { return "strings" }

// addressListFlag is a comma-separated list of host addresses with a
// default: the first value given replaces the default rather than adding
// to it, AllowAll allows every address (nil), and an address that does not
// parse stops the manager rather than refusing every mapping later.
type addressListFlag struct {
	list *[]string
	set  bool
}

func (f *addressListFlag) String() string {
	if f.list == nil || *f.list == nil {
		return AllowAll
	}
	return strings.Join(*f.list, ",")
}

func (f *addressListFlag) Set(value string) error {
	if strings.TrimSpace(value) == AllowAll {
		*f.list, f.set = nil, true
		return nil
	}
	if !f.set || *f.list == nil {
		*f.list, f.set = []string{}, true
	}
	for _, v := range strings.Split(value, ",") {
		if v = strings.TrimSpace(v); v == "" {
			continue
		}
		if _, err := ListenAddress(field.NewPath("--"+FlagAllowedHostListenAddresses), v); err != nil {
			return fmt.Errorf("failed to parse host address %q: %w", v, err)
		}
		*f.list = append(*f.list, v)
	}
	return nil
}

func (f *addressListFlag) Type() string { return "addresses" }

// localEngine returns p.LocalEngineNamespaces, made when a local engine
// flag is first given a value.
func (p *Policy) localEngine() *infrav1.AllowedNamespaces {
	if p.LocalEngineNamespaces == nil {
		p.LocalEngineNamespaces = &infrav1.AllowedNamespaces{}
	}
	return p.LocalEngineNamespaces
}

// localNamespacesFlag is --local-engine-allowed-namespaces. An empty value
// or AllowAll is as if the flag were not given, so that the manifest's
// default (AllowAll) keeps every namespace on the manager's own engine.
type localNamespacesFlag struct{ p *Policy }

func (f *localNamespacesFlag) String() string {
	if f.p == nil || f.p.LocalEngineNamespaces == nil {
		return ""
	}
	return strings.Join(f.p.LocalEngineNamespaces.List, ",")
}

func (f *localNamespacesFlag) Set(value string) error {
	if strings.TrimSpace(value) == AllowAll {
		return nil
	}
	for _, v := range strings.Split(value, ",") {
		if v = strings.TrimSpace(v); v != "" {
			a := f.p.localEngine()
			a.List = append(a.List, v)
		}
	}
	return nil
}

func (f *localNamespacesFlag) Type() string { return "strings" }

// localSelectorFlag is --local-engine-namespace-selector, parsed when
// given, so that a selector that does not parse stops the manager rather
// than refusing every cluster later. An empty value or AllowAll is as if
// the flag were not given.
type localSelectorFlag struct{ p *Policy }

func (f *localSelectorFlag) String() string {
	if f.p == nil || f.p.LocalEngineNamespaces == nil || f.p.LocalEngineNamespaces.Selector == nil {
		return ""
	}
	return metav1.FormatLabelSelector(f.p.LocalEngineNamespaces.Selector)
}

func (f *localSelectorFlag) Set(value string) error {
	if v := strings.TrimSpace(value); v == "" || v == AllowAll {
		return nil
	}
	selector, err := metav1.ParseToLabelSelector(value)
	if err != nil {
		return fmt.Errorf("failed to parse the label selector %q: %w", value, err)
	}
	f.p.localEngine().Selector = selector
	return nil
}

func (f *localSelectorFlag) Type() string { return "selector" }
