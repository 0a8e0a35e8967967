package nodeaddr

// ForgetRefused empties the process-wide record of refused addresses, so
// that one test's refusals do not steer another's picks.
func ForgetRefused() { refused = addrSets{} }

// LockNetwork takes the lock that serialises the picks on network.
func LockNetwork(network string) (unlock func()) { return networkLocks.lock(network) }
