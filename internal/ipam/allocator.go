package ipam

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
)

// Default node mask sizes, matching kube-controller-manager.
const (
	DefaultNodeMaskSizeIPv4 = 24
	DefaultNodeMaskSizeIPv6 = 64
)

// Config describes a cluster's pod network.
type Config struct {
	// ClusterCIDRs holds one CIDR (IPv4 or IPv6) or two (one per family,
	// dual stack). The order is kept: allocations list their CIDRs in
	// the same order, so the first is the node's primary family.
	ClusterCIDRs []netip.Prefix
	// NodeMaskSizeIPv4 and NodeMaskSizeIPv6 are the prefix lengths of
	// each node's subnet; 0 means the default (/24 and /64).
	NodeMaskSizeIPv4 int
	NodeMaskSizeIPv6 int
}

// FamilyUsage reports how full one family is, for metrics and conditions.
type FamilyUsage struct {
	ClusterCIDR  netip.Prefix
	NodeMaskSize int
	InUse        int
	Total        int
}

// record holds an owner's CIDR per family, indexed like Allocator.sets;
// an invalid Prefix means the owner holds nothing in that family.
type record [2]netip.Prefix

// Allocator hands out node pod CIDRs per owner. It is safe for concurrent
// use.
type Allocator struct {
	mu   sync.Mutex
	sets []*CIDRSet
	// Owners live in a slab indexed by slot so that the per-subnet holder
	// tables can name an owner with an int32 rather than a string; this
	// keeps a whole /8 of churn to one map insert and delete per owner.
	slots   map[string]int32
	entries []entry
	free    []int32
	// holders maps each used subnet, per set, to its owner's slot+1, so
	// a conflict error can name the holder without a scan.
	holders []holderTable
}

type entry struct {
	owner string
	rec   record
}

// holderTable is a paged array, so memory follows the subnets actually
// used rather than the up to MaxSubnets a family may hold.
type holderTable struct {
	pages [][]int32
}

const holderPageBits = 12

func newHolderTable(total int) holderTable {
	return holderTable{pages: make([][]int32, (total+1<<holderPageBits-1)>>holderPageBits)}
}

func (h *holderTable) get(i int) int32 {
	p := h.pages[i>>holderPageBits]
	if p == nil {
		return 0
	}
	return p[i&(1<<holderPageBits-1)]
}

func (h *holderTable) set(i int, v int32) {
	p := h.pages[i>>holderPageBits]
	if p == nil {
		if v == 0 {
			return
		}
		p = make([]int32, 1<<holderPageBits)
		h.pages[i>>holderPageBits] = p
	}
	p[i&(1<<holderPageBits-1)] = v
}

// New validates cfg and returns an empty Allocator.
func New(cfg Config) (*Allocator, error) {
	return newAllocator(cfg, 0)
}

func newAllocator(cfg Config, sizeHint int) (*Allocator, error) {
	m4, m6 := cfg.NodeMaskSizeIPv4, cfg.NodeMaskSizeIPv6
	if m4 == 0 {
		m4 = DefaultNodeMaskSizeIPv4
	}
	if m6 == 0 {
		m6 = DefaultNodeMaskSizeIPv6
	}
	// Checked even when the family is not configured: a nonsensical
	// value is a typo worth reporting before someone adds that family.
	if m4 < 0 || m4 > 32 {
		return nil, fmt.Errorf("%w: IPv4 node mask size %d must be between 1 and 32 (0 means /24)", ErrInvalidConfig, cfg.NodeMaskSizeIPv4)
	}
	if m6 < 0 || m6 > 128 {
		return nil, fmt.Errorf("%w: IPv6 node mask size %d must be between 1 and 128 (0 means /64)", ErrInvalidConfig, cfg.NodeMaskSizeIPv6)
	}
	switch n := len(cfg.ClusterCIDRs); {
	case n == 0:
		return nil, fmt.Errorf("%w: at least one cluster CIDR is required", ErrInvalidConfig)
	case n > 2:
		return nil, fmt.Errorf("%w: at most two cluster CIDRs (one per family) are supported, got %d: %v", ErrInvalidConfig, n, cfg.ClusterCIDRs)
	}
	a := &Allocator{slots: make(map[string]int32, sizeHint), entries: make([]entry, 0, sizeHint)}
	for i, c := range cfg.ClusterCIDRs {
		if !c.IsValid() {
			return nil, fmt.Errorf("%w: cluster CIDR #%d (%s) is not a valid prefix", ErrInvalidConfig, i, c)
		}
		for _, prev := range a.sets {
			if prev.is4 == c.Addr().Is4() {
				return nil, fmt.Errorf("%w: cluster CIDRs %s and %s are both %s; dual stack needs one CIDR per family",
					ErrInvalidConfig, prev.cluster, c, familyName(prev.is4))
			}
		}
		mask := m6
		if c.Addr().Is4() {
			mask = m4
		}
		s, err := NewCIDRSet(c, mask)
		if err != nil {
			return nil, err
		}
		a.sets = append(a.sets, s)
		a.holders = append(a.holders, newHolderTable(s.total))
	}
	return a, nil
}

// Rebuild returns an Allocator holding every allocation in existing, the
// owner→CIDRs records of a cluster's machines and nodes. Call it before
// handing out anything new after a restart or move, or a new allocation
// can land on a subnet a live node still uses.
//
// Records are replayed in sorted owner order, and each CIDR on its own,
// so the result does not depend on map order and a bad CIDR does not
// cost the owner's good ones their protection. When two owners claim an
// overlapping CIDR, the one sorting first keeps it. Every skipped CIDR is
// reported in the returned errors. The Allocator is nil only if cfg is
// invalid.
func Rebuild(cfg Config, existing map[string][]netip.Prefix) (*Allocator, []error) {
	a, err := newAllocator(cfg, len(existing))
	if err != nil {
		return nil, []error{err}
	}
	var errs []error
	for _, owner := range slices.Sorted(maps.Keys(existing)) {
		if owner == "" {
			errs = append(errs, fmt.Errorf("%w: owner must not be empty (occupying %v)", ErrInvalidArgument, existing[owner]))
			continue
		}
		cidrs := existing[owner]
		for k := range cidrs {
			// No lock needed: nobody else can see a yet.
			if err := a.occupyLocked(owner, cidrs[k:k+1]); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return a, errs
}

// Allocate returns owner's CIDRs, one per configured family, allocating
// whatever it does not hold yet. Calling it again returns the same CIDRs,
// so retries never leak subnets; an owner holding only some families
// (e.g. after the cluster became dual stack) gets the missing ones added.
// On failure nothing new is kept.
func (a *Allocator) Allocate(owner string) ([]netip.Prefix, error) {
	if owner == "" {
		return nil, fmt.Errorf("%w: owner must not be empty", ErrInvalidArgument)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	slot, ok := a.slots[owner]
	var rec record
	if ok {
		rec = a.entries[slot].rec
	}
	var fresh [2]bool
	for i, s := range a.sets {
		if rec[i].IsValid() {
			continue
		}
		p, err := s.Allocate()
		if err != nil {
			for j := range i {
				if fresh[j] {
					_ = a.sets[j].Release(rec[j])
				}
			}
			return nil, fmt.Errorf("allocating pod CIDR for %q: %w", owner, err)
		}
		rec[i], fresh[i] = p, true
	}
	if fresh != [2]bool{} {
		if !ok {
			slot = a.newSlot(owner)
		}
		a.entries[slot].rec = rec
		for i, s := range a.sets {
			if fresh[i] {
				a.holders[i].set(s.index(rec[i].Addr()), slot+1)
			}
		}
	}
	return a.list(rec), nil
}

func (a *Allocator) newSlot(owner string) int32 {
	var slot int32
	if n := len(a.free); n > 0 {
		slot = a.free[n-1]
		a.free = a.free[:n-1]
		a.entries[slot] = entry{owner: owner}
	} else {
		slot = int32(len(a.entries))
		a.entries = append(a.entries, entry{owner: owner})
	}
	a.slots[owner] = slot
	return slot
}

// Occupy records that owner already holds cidrs, e.g. a Node's existing
// podCIDRs, so they are never handed to anyone else. cidrs may name each
// configured family at most once, in any order, and may leave families
// out. A CIDR shorter than the node mask reserves every node subnet it
// covers; a longer one reserves the subnet containing it.
//
// Occupy is all or nothing. It fails with ErrOutOfRange if a CIDR is
// outside its family's cluster CIDR, with ErrConflict if a CIDR overlaps
// another owner's or the owner already holds a different CIDR of that
// family, and with ErrInvalidArgument for an empty owner, an empty list,
// an invalid prefix or a family given twice. Occupying what the owner
// already holds is a no-op.
func (a *Allocator) Occupy(owner string, cidrs []netip.Prefix) error {
	if owner == "" {
		return fmt.Errorf("%w: owner must not be empty (occupying %v)", ErrInvalidArgument, cidrs)
	}
	if len(cidrs) == 0 {
		return fmt.Errorf("%w: no CIDRs given to occupy for %q", ErrInvalidArgument, owner)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.occupyLocked(owner, cidrs)
}

func (a *Allocator) occupyLocked(owner string, cidrs []netip.Prefix) error {
	slot, ok := a.slots[owner]
	var rec record
	if ok {
		rec = a.entries[slot].rec
	}
	var want record
	var begin, count [2]int
	for _, c := range cidrs {
		i, b, n, err := a.locate(c)
		if err != nil {
			return fmt.Errorf("occupying pod CIDR for %q: %w", owner, err)
		}
		c = c.Masked()
		switch {
		case want[i].IsValid():
			return fmt.Errorf("%w: %q claims two %s CIDRs, %s and %s", ErrInvalidArgument, owner, familyName(a.sets[i].is4), want[i], c)
		case rec[i].IsValid() && rec[i] != c:
			return fmt.Errorf("%w: %q already holds %s, cannot also occupy %s", ErrConflict, owner, rec[i], c)
		case !rec[i].IsValid():
			if j := a.sets[i].firstUsed(b, b+n); j >= 0 {
				holder := "<unknown>" // unreachable while holders mirror the bitmap
				if h := a.holders[i].get(j); h > 0 {
					holder = a.entries[h-1].owner
				}
				return fmt.Errorf("%w: %s for %q overlaps %s held by %q", ErrConflict, c, owner, a.sets[i].prefixAt(j), holder)
			}
		}
		want[i], begin[i], count[i] = c, b, n
	}
	for i, s := range a.sets {
		if !want[i].IsValid() || rec[i].IsValid() {
			continue
		}
		if !ok {
			slot, ok = a.newSlot(owner), true
		}
		b, e := begin[i], begin[i]+count[i]
		s.inUse += s.setRange(b, e)
		for k := b; k < e; k++ {
			a.holders[i].set(k, slot+1)
		}
		a.entries[slot].rec[i] = want[i]
	}
	return nil
}

// locate finds the set for c's family and the subnets c touches.
func (a *Allocator) locate(c netip.Prefix) (set, begin, count int, err error) {
	if !c.IsValid() {
		return 0, 0, 0, fmt.Errorf("%w: %s is not a valid prefix", ErrInvalidArgument, c)
	}
	for i, s := range a.sets {
		if s.is4 == c.Addr().Is4() {
			b, n, err := s.span(c)
			return i, b, n, err
		}
	}
	return 0, 0, 0, fmt.Errorf("%w: %s is %s but no %s cluster CIDR is configured (have %v)",
		ErrOutOfRange, c, familyName(c.Addr().Is4()), familyName(c.Addr().Is4()), a.clusterCIDRs())
}

// Release frees everything owner holds and reports whether it held
// anything. It must only be called once the owner's node can no longer
// use the CIDRs; see the package documentation.
func (a *Allocator) Release(owner string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	slot, ok := a.slots[owner]
	if !ok {
		return false
	}
	rec := a.entries[slot].rec
	for i, s := range a.sets {
		if !rec[i].IsValid() {
			continue
		}
		// span cannot fail: the prefix was validated when recorded.
		b, n, err := s.span(rec[i])
		if err != nil {
			continue
		}
		s.inUse -= s.clearRange(b, b+n)
		for k := b; k < b+n; k++ {
			a.holders[i].set(k, 0)
		}
	}
	delete(a.slots, owner)
	a.entries[slot] = entry{}
	a.free = append(a.free, slot)
	return true
}

// Get returns owner's CIDRs in cluster CIDR order, and whether it holds any.
func (a *Allocator) Get(owner string) ([]netip.Prefix, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	slot, ok := a.slots[owner]
	if !ok {
		return nil, false
	}
	return a.list(a.entries[slot].rec), true
}

// Allocations returns a copy of every owner's CIDRs, in the form Rebuild
// takes.
func (a *Allocator) Allocations() map[string][]netip.Prefix {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string][]netip.Prefix, len(a.slots))
	for o, slot := range a.slots {
		out[o] = a.list(a.entries[slot].rec)
	}
	return out
}

// Usage reports, per cluster CIDR in configured order, how many node
// subnets are in use.
func (a *Allocator) Usage() []FamilyUsage {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]FamilyUsage, len(a.sets))
	for i, s := range a.sets {
		out[i] = FamilyUsage{ClusterCIDR: s.cluster, NodeMaskSize: s.nodeBits, InUse: s.inUse, Total: s.total}
	}
	return out
}

func (a *Allocator) list(rec record) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(a.sets))
	for i := range a.sets {
		if rec[i].IsValid() {
			out = append(out, rec[i])
		}
	}
	return out
}

func (a *Allocator) clusterCIDRs() []netip.Prefix {
	out := make([]netip.Prefix, len(a.sets))
	for i, s := range a.sets {
		out[i] = s.cluster
	}
	return out
}
