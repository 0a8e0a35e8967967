package nodeaddr

// ForgetRefused empties the process-wide record of refused addresses, so
// that one test's refusals do not steer another's picks.
func ForgetRefused() { refused = refusedAddrs{} }
