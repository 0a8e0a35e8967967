// Package lifecycle runs a ContainerMachine's life as small phases, in the
// manner of Karpenter's NodeClaim lifecycle: Launch, Bootstrap, Provision,
// Registration, Initialization and Liveness, plus Termination on delete.
//
// Each phase is a file and holds only what it uses. Each is idempotent,
// gated on its own condition, and reads time only from the injected clock,
// so that a unit test can step through every timeout. Phases only observe
// and act; they record what they saw in conditions and in the scope, and
// each condition has one writer. The controller then derives Ready and the
// printed phase from the conditions with the pure setters of status.go.
//
// Where a machine's container runs, and whether it may run yet, is the
// machine provider's (package machineprovider): Launch is one call to its
// Create, and Termination one to its Delete. The later phases reach the
// container through the engine runtime Launch found it on.
//
// Phases never block a reconcile worker for long: bootstrap runs on its own
// goroutine under its own deadline (see BootstrapRunner), and waiting is
// expressed as RequeueAfter, not as sleeping.
package lifecycle
