package placement

// The identity hash is part of the cluster's on-disk and on-wire contract:
// every node, of every version, on every platform, must map a kind/key to
// the same shard, or two nodes would disagree about who owns an actor.
// It is therefore implemented here by hand (not taken from a library whose
// behaviour could change) and pinned by golden vectors in hash_test.go.
//
// The hash is 64-bit FNV-1a (offset basis 14695981039346656037, prime
// 1099511628211) over the bytes of kind, one 0x00 separator byte, and the
// bytes of key. The separator keeps ("ab","c") and ("a","bc") apart; kind
// names never contain NUL. The shard is the hash modulo the shard count,
// which is fixed for the life of a cluster.

const (
	fnvOffset64 uint64 = 14695981039346656037
	fnvPrime64  uint64 = 1099511628211
)

// fnv1a64 folds b into the running FNV-1a state h.
func fnv1a64(h uint64, b string) uint64 {
	for i := 0; i < len(b); i++ {
		h ^= uint64(b[i])
		h *= fnvPrime64
	}
	return h
}

// IdentityHash returns the stable 64-bit hash of the identity kind/key.
// It never changes between versions; see the package documentation.
func IdentityHash(kind, key string) uint64 {
	h := fnv1a64(fnvOffset64, kind)
	h ^= 0
	h *= fnvPrime64
	return fnv1a64(h, key)
}

// ShardOf returns the shard, in [0, shards), that holds the identity
// kind/key. shards must be positive; ShardOf panics otherwise, because a
// cluster always has a fixed, positive shard count.
func ShardOf(kind, key string, shards int) int {
	if shards <= 0 {
		panic("placement: ShardOf with non-positive shard count")
	}
	return int(IdentityHash(kind, key) % uint64(shards))
}

// mix64 is the splitmix64 finalizer: a bijection on uint64 with good
// avalanche, used to turn (node, shard) pairs into rendezvous weights.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// nodeHash is the stable hash of a node name for rendezvous weights.
func nodeHash(name string) uint64 { return fnv1a64(fnvOffset64, name) }

// rendezvousWeight is the highest-random-weight score of node (given by
// its nodeHash) for shard n of group g (given by its groupSalt). The
// highest score wins. Like IdentityHash it is part of the contract: a
// change would move shards between otherwise unchanged nodes on upgrade.
func rendezvousWeight(nodeH, groupSalt uint64, shard int) uint64 {
	return mix64(nodeH ^ mix64(groupSalt^uint64(shard)*0x9e3779b97f4a7c15))
}
