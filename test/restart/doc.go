// Package restart is make test-restart's assertion that a real cluster
// survives a restart of its container engine (docs/restarts.md).
// hack/quickstart/restart-test.sh brings up the management cluster
// capct-rstest and the cluster rstest through the quickstart's machinery,
// starts the probe pods, and runs this package's test with the build tag
// realcluster; the test stops and starts the engine through the script
// (restart-test.sh engine-stop, engine-start), then checks what came back.
package restart
