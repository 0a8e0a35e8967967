// Package ssa applies the objects CAPCT generates with server-side apply
// (SSA), and remembers which applies would change nothing so that they are
// not sent again.
//
// # Why server-side apply
//
// A controller states the fields it has an opinion on and nothing else. The
// API server merges that intent with what other writers (users, Cluster API,
// webhooks, other controllers) set, records who owns which field in
// metadata.managedFields, and removes a field the controller stops sending
// if nobody else owns it. A read-modify-write Update instead has to carry
// every field of the object, races other writers on resourceVersion and
// cannot tell "I do not care about this field" from "delete this field".
//
// # One field owner per controller
//
// The field owner (field manager) is the unit of ownership: an apply sets the
// complete set of fields that owner wants, and every field the same owner
// sent before but omits now is removed. Two controllers sharing an owner name
// would therefore delete each other's fields; one controller using two names
// would never clean up fields it dropped under the other name. Each CAPCT
// controller uses one constant owner name, e.g. "capct-containermachine".
//
// # Forced ownership
//
// Every apply is sent with force=true. CAPCT's controllers are the authority
// for the objects they generate: when another manager set a field CAPCT
// generates (a user's kubectl edit, an older CAPCT that used Update), the
// controller must take the field back and converge rather than stop on a
// conflict that nobody will resolve. Fields CAPCT does not send are never
// touched, so forcing only affects fields CAPCT has an opinion on.
//
// # What is stripped before sending
//
// The apply body is the caller's object with what the server owns removed:
// metadata.creationTimestamp, metadata.managedFields, metadata.generation,
// metadata.selfLink, the deletion fields, metadata.resourceVersion (kept only
// with WithOptimisticLock), and status for a main-resource apply. A status
// apply (ApplyStatus) sends only apiVersion, kind, name, namespace, uid and
// status. Typed objects are converted to unstructured; apiVersion and kind
// come from the client's scheme when TypeMeta is empty. A typed object
// carries its zero values for fields without omitempty/omitzero, so CAPCT's
// generated types keep every optional field omitempty: a zero value in the
// body is an opinion the controller will own.
//
// # The cache and its key
//
// A steady-state reconcile re-applies the same intent to an object that
// already matches it. The server answers such an apply without writing, but
// it still costs a PATCH round trip and admission. Cluster API measured that
// skipping them cut a ClusterClass quickstart from about 310 to 148 PATCH
// calls (kubernetes-sigs/cluster-api#8207). With WithCache, Apply computes
//
//	key = GVK / namespace / name @ resourceVersion # sha256(field owner, subresource, stripped body)
//
// and does not send the apply when the key is in the cache. The
// resourceVersion is the one of the object as the caller last saw it: the
// object passed with WithOriginal, else the resourceVersion the applied
// object carries; without either, nothing can be skipped.
//
// After every successful apply the key is recorded with the resourceVersion
// the server returned and the hash of the body that was sent. This covers
// both outcomes:
//
//   - The apply changed nothing: the returned resourceVersion is the one the
//     object already had, and the same body at that version is a no-op again.
//   - The apply changed the object: the returned object is the result of
//     exactly this body with forced ownership. Re-applying the same body to
//     that same version finds every sent field already at its value and owned
//     by this owner, and every field dropped from the body already removed,
//     so it changes nothing either (the server keeps the managedFields
//     timestamp when the field set does not change).
//
// Why it is correct: any write by anyone - a field value, a label, a change
// of ownership in managedFields, a status update - bumps resourceVersion, so
// the key no longer matches and the next apply is sent. A hit is therefore
// only possible while the object is byte for byte what this exact request
// produced or left alone. A stale original (an informer that has not seen the
// newest version yet) can cause one skip, after which the watch event for the
// new version triggers a reconcile with the new resourceVersion, which misses
// and applies. Dry-run applies are never recorded.
//
// The cache is bounded by a TTL (10 minutes by default, refreshed on every
// hit) and a maximum number of entries; keys of old resourceVersions simply
// age out. The TTL bounds memory, not correctness.
//
// # One write mode for a controller's own status
//
// A controller's own status keeps one write mode; never mix modes on the same
// fields. If a controller writes a status field with a merge patch or Update
// (owner "Go-http-client/update" or similar) and also applies it, the two
// managers co-own or steal the field on every reconcile, each write bumps
// resourceVersion, the cache never hits, and fields one mode removes the
// other brings back. Status of objects CAPCT generates is written with
// ApplyStatus only; a controller that patches its own status with CAPI's
// patch helper keeps doing only that.
package ssa
