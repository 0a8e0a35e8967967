// Package chaos is make test-chaos (docs/restarts.md, "Chaos"): CAPCT's
// manager is killed with SIGKILL at random points while a MachinePool
// scales from 0 to 10 real nodes and while the whole cluster is deleted,
// and the engine is restarted once in the middle of the scale-out.
// hack/quickstart/chaos-test.sh brings up the management cluster
// capct-chtest and the cluster chtest (one control plane, an empty
// MachineDeployment and MachinePool) through the quickstart's machinery and
// runs this package's test with the build tag realcluster. Afterwards no
// container, network or volume of the cluster may be left, no pod CIDR may
// ever have been held by two Nodes or two machines' records at once, and
// every Node must have been Ready.
package chaos
