package provisioning

import (
	"fmt"
	"regexp"
)

// hostnameVar matches the cloud-init jinja variables that hold the instance's
// hostname, which kubeadm templates use (e.g. for the node name or
// provider-id=container:///{{ ds.meta_data.local_hostname }}).
var hostnameVar = regexp.MustCompile(`\{\{\s*(?:ds\.meta_data\.(?:local_)?hostname|v1\.local_hostname)\s*\}\}`)

// substitute replaces the hostname variables in every path, file content and
// command argument.
func substitute(steps []Step, vars Vars) error {
	repl := []byte(vars.Hostname)
	check := func(b []byte, where string) error {
		if vars.Hostname == "" && hostnameVar.Match(b) {
			return fmt.Errorf("%w: %s uses %s", ErrMissingHostname, where, hostnameVar.Find(b))
		}
		return nil
	}
	for i := range steps {
		s := &steps[i]
		if f := s.File; f != nil {
			if err := check([]byte(f.Path), "path "+f.Path); err != nil {
				return err
			}
			if err := check(f.Content, "file "+f.Path); err != nil {
				return err
			}
			f.Path = hostnameVar.ReplaceAllLiteralString(f.Path, vars.Hostname)
			if hostnameVar.Match(f.Content) {
				f.Content = hostnameVar.ReplaceAllLiteral(f.Content, repl)
			}
			continue
		}
		for j, arg := range s.Command {
			if err := check([]byte(arg), fmt.Sprintf("command %q", describe(*s))); err != nil {
				return err
			}
			s.Command[j] = hostnameVar.ReplaceAllLiteralString(arg, vars.Hostname)
		}
	}
	return nil
}
