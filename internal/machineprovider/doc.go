// Package machineprovider is the one seam between a machine's lifecycle and
// the container engines its containers run on, as Karpenter's cloud
// provider is for a NodeClaim's: the lifecycle asks it to Create, Get and
// Delete a machine's container and to List a cluster's, and never talks to
// an engine about where or whether a container may run.
//
// Everything a launch must decide before the engine is called lives here:
// which engine a machine runs on (placement, recorded in
// infrav1.EngineAnnotation before any container is made), whether the host
// has room (host capacity), whether the manager's policy allows what the
// machine asks for, whether its images are on its engine (copying them from
// another engine of the cluster, or pulling them where the machine's
// imagePullPolicy allows, when they are not), and which fixed
// addresses the container gets. A launch that cannot happen yet is not an
// error: Create returns a *WaitError with the reason the lifecycle writes
// into the Launched condition and when to look again.
//
// The provider writes no condition and records no event: the lifecycle is
// the one writer of each condition, and it decides what a person is told.
package machineprovider
