package nodeipam

// The metrics, for the tests of package nodeipam_test.
var (
	AllocationFailures = allocationFailures
	CIDRsInUse         = cidrsInUse
	CIDRsTotal         = cidrsTotal
)
