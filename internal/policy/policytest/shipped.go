// Package policytest gives tests the policy a manager has when `clusterctl
// init` installs it with no variable set. Only tests import it: it reads
// config/manager/manager.yaml with clusterctl's own variable processor,
// which the manager binary does not need.
package policytest

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client/yamlprocessor"
	"sigs.k8s.io/yaml"

	"github.com/capct/cluster-api-provider-container/internal/policy"
)

// Shipped reads the manager's manifest at path, substitutes it as
// clusterctl does with no variable set, and parses the manager container's
// policy flags with the manager's own AddFlags. It returns the policy and
// the policy flags the manifest passes. Reading the manifest, rather than
// writing the defaults down again, keeps one source of them.
func Shipped(path string) (policy.Policy, []string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return policy.Policy{}, nil, fmt.Errorf("failed to read the manager's manifest: %w", err)
	}
	unset := func(string) (string, error) { return "", errors.New("not set") }
	out, err := yamlprocessor.NewSimpleProcessor().Process(raw, unset)
	if err != nil {
		return policy.Policy{}, nil, fmt.Errorf("failed to substitute the manager's manifest with no variable set: %w", err)
	}
	var d appsv1.Deployment
	if err := yaml.Unmarshal(out, &d); err != nil {
		return policy.Policy{}, nil, fmt.Errorf("failed to decode the manager's Deployment: %w", err)
	}
	var p policy.Policy
	fs := pflag.NewFlagSet("manager", pflag.ContinueOnError)
	p.AddFlags(fs)
	var args []string
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name != "manager" {
			continue
		}
		// Only the policy's flags: the manager's others are not bound here.
		for _, a := range c.Args {
			name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
			if fs.Lookup(name) != nil {
				args = append(args, a)
			}
		}
	}
	if len(args) == 0 {
		return policy.Policy{}, nil, errors.New("the manager's manifest passes no policy flag")
	}
	if err := fs.Parse(args); err != nil {
		return policy.Policy{}, nil, fmt.Errorf("failed to parse the manifest's policy flags %v: %w", args, err)
	}
	return p, args, nil
}
