package policy

import (
	"strings"

	"github.com/spf13/pflag"
)

// AddFlags binds the policy's manager flags to p. A list flag that is not
// given leaves its list nil (everything allowed); given, even as an empty
// string, it allows only what it lists.
func (p *Policy) AddFlags(fs *pflag.FlagSet) {
	fs.Var(&listFlag{list: &p.HostPathPrefixes}, FlagAllowedHostPathPrefixes,
		"Comma-separated host paths that extraMounts may bind, each with what lies below it (e.g. /srv/capct). "+
			"Unset allows every path; an empty value forbids extraMounts.")
	fs.Var(&listFlag{list: &p.AllowedNetworks}, FlagAllowedNetworks,
		"Comma-separated names of existing networks that Unmanaged clusters may join (e.g. capct-mgmt). "+
			"Unset allows every network but bridge, host and none, which are allowed only when listed here.")
	fs.Var(&listFlag{list: &p.ImagePrefixes}, FlagAllowedImagePrefixes,
		"Comma-separated prefixes of the images that nodes, load balancers and preloads may use (e.g. capct/,kindest/). "+
			"Unset allows every image.")
	fs.IntVar(&p.MaxMachinesPerCluster, FlagMaxMachinesPerCluster, DefaultMaxMachinesPerCluster,
		"Most ContainerMachines one cluster may have, counting every MachineDeployment, control plane and pool. 0 means no cap.")
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
