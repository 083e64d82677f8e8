// Package fnvcollide (review 34) finds printable preimages of store.ClientHash (64-bit FNV-1a).
package fnvcollide

import (
	"slices"
	"sort"
)

// Review 34: a preimage finder for the 64-bit FNV-1a of store.ClientHash, to show that a player
// can choose a client ID (what follows the transport's "s:<digest> " prefix: printable ASCII,
// at most wire.MaxRequestID characters) whose hash is any given client's. It takes a second.
//
// The trick: while the state's low byte is 0x00 or 0x80, XOR with a byte b < 0x80 is addition
// (h^b = h+b). After b, the byte a = (51*b) mod 128 (0xb3 = FNV's prime mod 256; 0x33 mod 128)
// clears the low 7 bits again. So a pair (b, a(b)) adds exactly P^k*(b*P^2 - a*P) to the final
// hash, independently of everything else: the hash is a sum of independent per-pair terms, and
// Wagner's generalised birthday algorithm (8 lists, 3 pairs each) finds terms summing to any
// target.

const (
	fnvOffset = 0xcbf29ce484222325
	fnvPrime  = 0x100000001b3
)

func fnvStep(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

func printable(c int) bool { return c >= 0x21 && c <= 0x7e }

type wEntry struct {
	v    uint64
	i, j int32
}

// wMerge returns a+b for the a in A, b in B with (a+b)&mask == 0.
func wMerge(A, B []wEntry, mask uint64, limit int) []wEntry {
	type kv struct {
		k uint64
		i int32
	}
	idx := make([]kv, len(B))
	for i, b := range B {
		idx[i] = kv{b.v & mask, int32(i)}
	}
	sort.Slice(idx, func(x, y int) bool { return idx[x].k < idx[y].k })
	var out []wEntry
	for i, a := range A {
		want := (-a.v) & mask
		k := sort.Search(len(idx), func(x int) bool { return idx[x].k >= want })
		for ; k < len(idx) && idx[k].k == want; k++ {
			out = append(out, wEntry{a.v + B[idx[k].i].v, int32(i), idx[k].i})
			if len(out) >= limit {
				return out
			}
		}
	}
	return out
}

// fnvPreimage returns a printable suffix s (at most 64 bytes) with ClientHash(prefix+s) == target.
func Preimage(prefix string, target uint64) (string, bool) {
	pw := make([]uint64, 2*24+1)
	pw[0] = 1
	for i := 1; i < len(pw); i++ {
		pw[i] = pw[i-1] * fnvPrime
	}
	var pinv uint64 = 1 // fnvPrime^-1 mod 2^64 (Newton)
	for range 6 {
		pinv *= 2 - fnvPrime*pinv
	}
	// A lead that brings the low byte to 0x00 or 0x80, and a last byte c that the 48 bytes in
	// between leave the low 7 bits for (every pair term is a multiple of 128).
	var h uint64
	lead, c := "", -1
	for l := 0; l < 94*94 && c < 0; l++ {
		lead = string(rune(0x21+l%94)) + string(rune(0x21+l/94))
		h = fnvStep(fnvOffset, prefix+lead)
		if a := int(h & 0x7f); a != 0 {
			if !printable(a) {
				continue
			}
			lead += string(rune(a))
			h = fnvStep(h, string(rune(a)))
		}
		if x := int((target*pinv - h*pw[48]) & 0x7f); printable(x) {
			c = x
		}
	}
	if c < 0 {
		return "", false
	}
	var opts []int
	for b := 0x21; b <= 0x7e; b++ {
		if printable(51 * b % 128) {
			opts = append(opts, b)
		}
	}
	const pairs, groups, per = 24, 8, 3
	term := func(k, b int) uint64 { // pair k (0-based) with first byte b
		a := uint64(51 * b % 128)
		return (uint64(b)*pw[2] - a*pw[1]) * pw[2*(pairs-1-k)]
	}
	d := target*pinv - uint64(c) - h*pw[2*pairs]
	const size = 1 << 17
	lists := make([][]wEntry, groups)
	for g := range groups {
		l := make([]wEntry, 0, size)
		n := len(opts)
		for c := 0; c < n*n*n && len(l) < size; c++ {
			x, y, z := c%n, c/n%n, c/n/n
			v := term(per*g, opts[x]) + term(per*g+1, opts[y]) + term(per*g+2, opts[z])
			if g == 0 {
				v -= d
			}
			l = append(l, wEntry{v: v, i: int32(c)})
		}
		lists[g] = l
	}
	var l1 [][]wEntry
	for g := 0; g < groups; g += 2 {
		l1 = append(l1, wMerge(lists[g], lists[g+1], 0xffff<<7, 1<<21))
	}
	l2 := [][]wEntry{wMerge(l1[0], l1[1], 0xffffffff<<7, 1<<22), wMerge(l1[2], l1[3], 0xffffffff<<7, 1<<22)}
	l3 := wMerge(l2[0], l2[1], ^uint64(0), 1)
	if len(l3) == 0 {
		return "", false
	}
	// Unwind to the leaf combos.
	var leaves []int32
	e := l3[0]
	for half, i2 := range []int32{e.i, e.j} {
		e2 := l2[half][i2]
		for q, i1 := range []int32{e2.i, e2.j} {
			e1 := l1[2*half+q][i1]
			leaves = append(leaves, lists[4*half+2*q][e1.i].i, lists[4*half+2*q+1][e1.j].i)
		}
	}
	s := []byte(lead)
	n := int32(len(opts))
	for _, c := range leaves {
		for _, x := range []int32{c % n, c / n % n, c / n / n} {
			b := opts[x]
			s = append(s, byte(b), byte(51*b%128))
		}
	}
	s = append(s, byte(c))
	out := string(s)
	if fnvStep(fnvOffset, prefix+out) != target || len(out) > 64 || slices.ContainsFunc(s, func(c byte) bool { return !printable(int(c)) }) {
		return "", false
	}
	return out, true
}
