package v1alpha1

// Condition types. Ready summarises the others and is what Cluster API
// mirrors into the owner's InfrastructureReady condition.
const (
	// ReadyCondition is true when the object is fully provisioned and
	// healthy, and reports deletion while it runs.
	ReadyCondition = "Ready"
	// PausedCondition reports whether reconciliation is paused.
	PausedCondition = "Paused"

	// LoadBalancerAvailableCondition: the cluster's network and HAProxy
	// container exist, the control-plane endpoint is set, and HAProxy runs
	// the configuration CAPCT wrote.
	LoadBalancerAvailableCondition = "LoadBalancerAvailable"

	// LaunchedCondition: the machine's container was created and started.
	// It stays True while the container exists, running or not; it turns
	// False for good (ContainerMissing) when the container is gone.
	LaunchedCondition = "Launched"
	// ContainerRunningCondition: the launched machine's container runs now.
	// It turns False at once when the container stops or restarts (or the
	// engine cannot be reached), without failing the machine, and True again
	// once the container runs and, for an initialized machine, its Node has
	// reported Ready since.
	ContainerRunningCondition = "ContainerRunning"
	// BootstrappedCondition: the bootstrap data ran to its sentinel file.
	BootstrappedCondition = "Bootstrapped"
	// RegisteredCondition: a Node with the machine's providerID exists.
	RegisteredCondition = "Registered"
	// InitializedCondition: the Node is Ready, untainted and has pod CIDRs.
	InitializedCondition = "Initialized"
	// PodCIDRAllocatedCondition: CAPCT's node IPAM allocated the machine's
	// pod CIDRs.
	PodCIDRAllocatedCondition = "PodCIDRAllocated"

	// EnginesReadyCondition: the ContainerEngines a cluster lists in
	// spec.engines can run its machines. Clusters that list engines carry
	// it, and a cluster that lists none does only while the manager's
	// --local-engine-* flags keep its namespace off the manager's own
	// engine.
	EnginesReadyCondition = "EnginesReady"

	// EngineDeletingCondition: a ContainerEngine being deleted waits for
	// the ContainerClusters that list it to go.
	EngineDeletingCondition = "Deleting"

	// EngineAvailableCondition: CAPCT reaches the ContainerEngine with the
	// credentials its spec names, and the engine answers.
	EngineAvailableCondition = "Available"
)

// Condition reasons.
const (
	// WaitingForClusterInfrastructureReason: the ContainerCluster is not
	// provisioned yet.
	WaitingForClusterInfrastructureReason = "WaitingForClusterInfrastructure"
	// WaitingForBootstrapDataReason: the bootstrap provider has not written
	// the data secret yet.
	WaitingForBootstrapDataReason = "WaitingForBootstrapData"
	// WaitingForOwnerReason: no Machine or Cluster owns the object yet.
	WaitingForOwnerReason = "WaitingForOwner"
	// WarmReason: a warm machine of a pool, booted and kept ready; it has
	// no bootstrap data and no Node until its pool promotes it
	// (WarmPoolLabel).
	WarmReason = "Warm"
	// ContainerMissingReason: the container disappeared out of band. CAPCT
	// does not silently recreate it.
	ContainerMissingReason = "ContainerMissing"
	// LaunchFailedReason: the container could not be created or started.
	LaunchFailedReason = "LaunchFailed"
	// InvalidSpecReason: the input can never succeed (an unparseable version,
	// malformed bootstrap data); retrying will not help.
	InvalidSpecReason = "InvalidSpec"
	// WaitingForLaunchReason: the container does not run yet.
	WaitingForLaunchReason = "WaitingForLaunch"
	// WaitingForBootstrapReason: the bootstrap data has not finished yet.
	WaitingForBootstrapReason = "WaitingForBootstrap"
	// WaitingForRegistrationReason: no Node has registered yet.
	WaitingForRegistrationReason = "WaitingForRegistration"
	// WaitingForControlPlaneReason: the workload cluster's control plane is
	// not initialized yet.
	WaitingForControlPlaneReason = "WaitingForControlPlane"
	// BootstrapFailedReason: a bootstrap step failed; terminal, because
	// kubeadm cannot be re-run on a half-initialised node.
	BootstrapFailedReason = "BootstrapFailed"
	// InProgressReason: the phase is running.
	InProgressReason = "InProgress"
	// SucceededReason: the phase finished.
	SucceededReason = "Succeeded"
	// FailedReason: the phase failed and will be retried.
	FailedReason = "Failed"
	// TimedOutReason: the phase exceeded its timeout; terminal.
	TimedOutReason = "TimedOut"
	// NodeNotFoundReason: no Node with the machine's providerID or name.
	NodeNotFoundReason = "NodeNotFound"
	// NodeNotReadyReason: the Node exists but is not Ready.
	NodeNotReadyReason = "NodeNotReady"
	// ExhaustedReason: the cluster's pod network has no free node CIDR.
	ExhaustedReason = "Exhausted"
	// PodCIDRConflictReason: the Node already holds other pod CIDRs; CAPCT
	// does not fight an immutable field.
	PodCIDRConflictReason = "PodCIDRConflict"
	// DeletingReason: deletion is in progress.
	DeletingReason = "Deleting"
	// DisabledReason: the feature is turned off.
	DisabledReason = "Disabled"

	// RunningReason: the machine's container runs.
	RunningReason = "Running"
	// StoppedReason: the machine's container exists but does not run
	// (exited, created, paused or dead). The engine's restart policy or a
	// person may start it again; CAPCT reports it and waits.
	StoppedReason = "Stopped"
	// RestartingReason: the engine is restarting the machine's container
	// under its restart policy.
	RestartingReason = "Restarting"
	// EngineUnreachableReason: the container engine did not answer, so the
	// container's state is not known. It never counts toward a timeout.
	EngineUnreachableReason = "EngineUnreachable"
	// WaitingForHostCapacityReason: the container host's kernel limits
	// (for example fs.inotify.max_user_instances) have no room for another
	// node; the machine waits, without failing, until they are raised or
	// another node goes.
	WaitingForHostCapacityReason = "WaitingForHostCapacity"
	// LoadBalancerConfigInvalidReason: HAProxy refused the rendered
	// configuration (haproxy -c); the previous one keeps serving.
	LoadBalancerConfigInvalidReason = "LoadBalancerConfigInvalid"
	// LoadBalancerReloadFailedReason: after a reload HAProxy does not run
	// the configuration CAPCT wrote, or cannot be asked which one it runs.
	LoadBalancerReloadFailedReason = "LoadBalancerReloadFailed"
	// RefusedByPolicyReason: the object asks for something the manager's
	// policy flags refuse (docs/security.md), for example a host path
	// outside --allowed-host-path-prefixes. The message names each field.
	// Nothing is made; it is looked at again when the object changes or
	// the manager restarts with other flags.
	RefusedByPolicyReason = "RefusedByPolicy"
	// ImageNotOnHostReason: an image the machine needs is not on the
	// container host, and its imagePullPolicy is Never (or no other engine
	// had it to copy). The message names each field; the machine launches
	// once the images are loaded.
	ImageNotOnHostReason = "ImageNotOnHost"
	// PullingImageReason: an image the machine or load balancer needs is
	// being pulled onto its engine from the image's registry; the message
	// says how far. It launches once the pull ends.
	PullingImageReason = "PullingImage"
	// ImagePullFailedReason: the engine could not pull an image the
	// machine or load balancer needs. The message names the field, the
	// image and the registry's answer (never the credentials); the pull is
	// tried again after a while, and the machine launches once the image
	// is on the engine.
	ImagePullFailedReason = "ImagePullFailed"
	// NotSupportedYetReason: the object asks for a feature whose API exists
	// but whose behaviour is not built yet (docs/multihost.md); nothing is
	// made for it.
	NotSupportedYetReason = "NotSupportedYet"
	// InUseReason: a ContainerEngine being deleted is still listed by
	// ContainerClusters, which the message names.
	InUseReason = "InUse"
	// EngineNotFoundReason: a ContainerCluster lists a ContainerEngine
	// that does not exist.
	EngineNotFoundReason = "EngineNotFound"
	// FailureDomainNotFoundReason: a machine's failure domain, or the
	// engine it records, is not an engine its ContainerCluster lists; or
	// no listed engine may run a control-plane machine. The machine waits.
	FailureDomainNotFoundReason = "FailureDomainNotFound"
	// NamespaceNotAllowedReason: a ContainerEngine the ContainerCluster
	// lists does not allow the cluster's namespace (its
	// spec.allowedNamespaces), or, for a cluster that lists none, the
	// manager's own engine does not (its --local-engine-allowed-namespaces
	// and --local-engine-namespace-selector).
	NamespaceNotAllowedReason = "NamespaceNotAllowed"
	// InvalidCredentialsReason: a ContainerEngine's Secret is missing, or
	// lacks what its endpoint needs, or holds something that does not
	// parse. The message names the Secret and the key, never their data.
	InvalidCredentialsReason = "InvalidCredentials"
	// CopyingImageReason: an image the machine needs is being copied to
	// its ContainerEngine from another engine that holds it; the message
	// says how far. The machine launches once the copy ends.
	CopyingImageReason = "CopyingImage"
	// EngineNotInSwarmReason: a ContainerCluster lists several engines,
	// and one of them is in no swarm, so the cluster's overlay network
	// cannot reach it.
	EngineNotInSwarmReason = "EngineNotInSwarm"
	// NoSwarmManagerReason: the first engine of a ContainerCluster on
	// several engines is not a swarm manager, and only a manager creates
	// (and shows) the cluster's overlay network.
	NoSwarmManagerReason = "NoSwarmManager"
	// SwarmMismatchReason: the engines of a ContainerCluster are in
	// different swarms, which no overlay network spans.
	SwarmMismatchReason = "SwarmMismatch"
	// NotClusterInfrastructureReason: the ContainerCluster's owner Cluster
	// names another object in spec.infrastructureRef. The cluster's network
	// and load balancer belong to that one, so CAPCT does not act on this
	// ContainerCluster: it records nothing, makes nothing, and deleting it
	// removes only CAPCT's finalizer.
	NotClusterInfrastructureReason = "NotClusterInfrastructure"
	// HostPathNotFoundReason: a host path of spec.extraMounts does not
	// exist on the container host. CAPCT does not create it; the machine
	// launches once it exists.
	HostPathNotFoundReason = "HostPathNotFound"
	// HostPortInUseReason: a host port of spec.extraPortMappings is held
	// by another container or program of the container host, so the engine
	// does not start the machine's container. The message names the field;
	// the machine starts once the port is free.
	HostPortInUseReason = "HostPortInUse"
)
