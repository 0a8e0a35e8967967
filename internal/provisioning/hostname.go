package provisioning

import (
	"fmt"
	"regexp"
)

// hostnameVar matches the cloud-init jinja variables that hold the instance's
// hostname, which kubeadm templates use (e.g. for the node name or
// provider-id=container:///{{ ds.meta_data.local_hostname }}).
var hostnameVar = regexp.MustCompile(`\{\{\s*(?:ds\.meta_data\.(?:local_)?hostname|v1\.local_hostname)\s*\}\}`)

// localIPv4Var matches the cloud-init jinja variable that holds the
// instance's private IPv4 address (EC2-style metadata; cloud-init has no v1
// key for it, so neither does CAPCT). Templates use it where the address of
// the default route is the wrong one, e.g. for the kubelet's node-ip and
// kubeadm's advertise address on an overlay network (docs/multihost.md).
var localIPv4Var = regexp.MustCompile(`\{\{\s*ds\.meta_data\.local_ipv4\s*\}\}`)

// jinjaVars are the variables substitute replaces: what matches them, the
// value from Vars, and the error when the data uses one whose value is
// empty (an empty replacement would make a wrong node name or address
// silently, so it is refused).
var jinjaVars = []struct {
	pattern *regexp.Regexp
	value   func(Vars) string
	missing error
}{
	{hostnameVar, func(v Vars) string { return v.Hostname }, ErrMissingHostname},
	{localIPv4Var, func(v Vars) string { return v.LocalIPv4 }, ErrMissingAddress},
}

// substitute replaces the jinja variables in every path, file content and
// command argument.
func substitute(steps []Step, vars Vars) error {
	for i := range steps {
		s := &steps[i]
		if f := s.File; f != nil {
			path, err := fill([]byte(f.Path), vars, "path "+f.Path)
			if err != nil {
				return err
			}
			content, err := fill(f.Content, vars, "file "+f.Path)
			if err != nil {
				return err
			}
			f.Path, f.Content = string(path), content
			continue
		}
		where := fmt.Sprintf("command %q", describe(*s))
		for j, arg := range s.Command {
			b, err := fill([]byte(arg), vars, where)
			if err != nil {
				return err
			}
			s.Command[j] = string(b)
		}
	}
	return nil
}

// fill returns b with every variable replaced, or b itself when it uses
// none (file contents can be large). where names b in the error. The values
// are a container name and an address, which hold no jinja, so one
// variable's value is never taken for another variable.
func fill(b []byte, vars Vars, where string) ([]byte, error) {
	for _, v := range jinjaVars {
		m := v.pattern.Find(b)
		if m == nil {
			continue
		}
		value := v.value(vars)
		if value == "" {
			return nil, fmt.Errorf("%w: %s uses %s", v.missing, where, m)
		}
		b = v.pattern.ReplaceAllLiteral(b, []byte(value))
	}
	return b, nil
}
