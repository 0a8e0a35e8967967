// Package scaleout is make test-scale-out's assertion of MachinePool
// scale-out on real nodes, and of what happens when the host runs out of
// inotify instances (docs/quickstart.md, "Scale-out and node capacity").
// hack/quickstart/scale-out-test.sh brings up the management cluster
// capct-sotest and the cluster sotest with an empty MachinePool through
// the quickstart's machinery and runs this package's test with the build
// tag realcluster. The script's profile and capacity modes are benches
// and stay in the script.
package scaleout
