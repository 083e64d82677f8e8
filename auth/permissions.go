package auth

import "github.com/tickfence/tickfence/store"

// The permissions of every role, in one place (DESIGN 9). Each subject is a NATS subject
// permission of the role's users; the comment beside it says what needs it. They were found by
// running tickd, tickctl and a gateway against a server enforcing them and reading the permission
// violations the server logs (TestRolesWork and the break-in tests in this package keep them
// honest).
//
// Subject permissions see one token per stream name, and `*` is a whole token: the data buckets
// of every epoch (tickfence-data-e<E>-p<k>, a name not known in advance) can only be matched by
// `*`. The account holds nothing but tickfence's streams, so `*` there means "a tickfence
// stream"; where a role needs only the control bucket, it is named.

// Stream and bucket names of the storage layout (DESIGN 3), as subject tokens.
const (
	controlKV  = "$KV.tickfence-control." // control bucket keys
	blobsO     = "$O.tickfence-blobs.>"   // its chunk and meta subjects
	cmds       = "tickfence.cmd.>"        // commands (DESIGN 5)
	frames     = "tickfence.out.>"        // frames (DESIGN 8)
	fxSubj     = "tickfence.fx.>"         // effects' subjects
	fxStream   = "tickfence-effects"      // the effects stream (natscmd.EffectsStream)
	jsAPI      = "$JS.API."               // JetStream API prefix
	flowCtl    = "$JS.FC.>"               // flow-control answers of ordered push consumers (object reads)
	dataShards = "$KV.*.shard.*"          // shard.<S> of the data buckets of every epoch
	dataInsts  = "$KV.*.inst.>"           // inst.<S>.<id> of the data buckets of every epoch
	dataDirAll = "$JS.API.DIRECT.GET.*.>" // KV Get on a bucket whose stream allows direct gets (the control bucket)
)

// perms is one role's permission lists (the user JWT's pub/sub allow and deny lists, and
// whether it may answer requests it received).
type perms struct {
	pubAllow, pubDeny, subAllow, subDeny []string
	// responses lets the user publish one reply to the reply subject of each request it
	// received (NATS allow_responses). No role has it: the server lets a responder publish there
	// whatever its own permissions deny, so a requester could aim a node's answer at any subject
	// (the confused deputy of DESIGN 9). Nodes answer with the narrow rights of their pubAllow.
	responses bool
}

// rolePerms is the permissions of role r for the user named name (its inbox prefix is
// InboxPrefix(name)).
func rolePerms(r Role, name string) perms {
	inbox := InboxPrefix(name) + ".>" // replies to this user's own requests (nats.CustomInboxPrefix)
	switch r {
	case Node:
		// A node credential of its own (tickctl auth user DIR node n1) writes only its own
		// lease, node.n1; the shared node.creds of Init (user "node") any node's.
		lease := controlKV + "node." + name
		if name == string(Node) {
			lease = controlKV + "node.*"
		}
		return perms{
			pubAllow: []string{
				jsAPI + "INFO",                     // jetstream.AccountInfo when the store opens
				jsAPI + "STREAM.INFO.*",            // open a bucket (KeyValue/ObjectStore), the partitions' streams
				jsAPI + "STREAM.CREATE.*",          // the first node creates the control and data buckets (each data bucket's stream made with atomic publishes: no STREAM.UPDATE, which would let it reconfigure any stream), the effects, blob and audit streams
				jsAPI + "STREAM.LEADER.STEPDOWN.*", // spread the partitions' stream leaders over the servers (R3/R5)
				jsAPI + "STREAM.MSG.GET.*",         // KV Get on the data buckets (their stream, updated for atomic batches, answers no direct get)
				dataDirAll,                         // KV Get: every bucket's last value by subject
				jsAPI + "CONSUMER.CREATE.*.>",      // KV watches and key listings (ordered consumers), object reads
				jsAPI + "CONSUMER.DELETE.*.*",      // ordered consumers are deleted when a watch stops
				flowCtl,                            // flow control of object reads (large state: ordered push consumers)
				dataShards,                         // KV puts on shard.<S>: token rotations, the coordinator's grants
				dataInsts,                          // KV puts on inst.<S>.<id>: the fenced records, tombstones
				lease,                              // its lease (per-message TTL), renewed and deleted when it leaves
				controlKV + store.LeaderKey,        // the coordinator's lease: candidates create it, the leader renews it
				controlKV + "move.*",               // the coordinator requests hand-offs, the old owner answers them
				controlKV + store.ClusterKey,       // the first node creates the cluster record (subject permissions cannot tell a create from an overwrite)
				blobsO,                             // large state uploaded before the record that points at it
				fxSubj,                             // effects, published after the write that holds them
				frames,                             // frames after each tick
				cmds,                               // Node.Client: the program's own players and bots (tickd's demo) send commands; a node runs the instances' logic anyway
				"_R_.>",                            // answers to commands from the players' account: the server's response subjects of requests that crossed accounts
				"_INBOX.*.cmd.>",                   // answers to commands from this account (tickctl, its own players): natscmd.Client's command inboxes, not anyone's JetStream replies
			},
			pubDeny: []string{
				controlKV + "drain.*",     // the operator's placement inputs are not a node's to write
				controlKV + "pin.*",       //
				controlKV + "weight.*",    //
				controlKV + "restore",     // a restore's claim is the admin's
				jsAPI + "STREAM.DELETE.>", // never delete a bucket (DESIGN 9)
			},
			subAllow: []string{
				cmds,  // serve commands of the shards it owns
				inbox, // its own requests' replies: JetStream API, KV acknowledgements, watches' deliveries
			},
		}
	case Admin:
		return perms{
			pubAllow: []string{
				jsAPI + ">",         // restore makes, seals and drops buckets (a half-made epoch's partitions are dropped and made again); gc purges objects
				"$KV.>",             // restore writes the new epoch's records and shards, the restore claim and cluster.epoch
				"$O.>",              // restore uploads the backup's blobs; gc deletes unreferenced ones
				flowCtl,             // flow control of its watches and object reads
				"tickfence.audit.>", // tickctl records each restore in the audit stream
			},
			subAllow: []string{
				inbox, // its own requests' replies
			},
		}
	case Gateway:
		// In the players' account (Init): tickfence.cmd.> and tickfence.out.> are its imports of
		// the trusted account's command service and frames, and nothing else is there.
		return perms{
			pubAllow: []string{
				cmds, // send commands (DESIGN 5)
			},
			subAllow: []string{
				inbox,  // its own commands' replies, and nobody else's
				frames, // watch instances' frames
			},
		}
	case Operator:
		return perms{
			pubAllow: []string{
				jsAPI + "INFO",                // jetstream.AccountInfo when the store opens
				jsAPI + "STREAM.INFO.*",       // open buckets, tickctl status' partition streams
				dataDirAll,                    // read every key (KV Get)
				jsAPI + "STREAM.MSG.GET.*",    // KV Get on the data buckets (their stream, updated for atomic batches, answers no direct get)
				jsAPI + "CONSUMER.CREATE.*.>", // list keys and watch (ordered consumers): shards, instances, progress of a move or drain
				jsAPI + "CONSUMER.DELETE.*.*", // a watch's consumer goes when it stops
				flowCtl,                       // flow control of object reads (backup of the blobs)
				controlKV + "move.*",          // tickctl move / rebalance request a hand-off
				controlKV + "drain.*",         // tickctl drain / undrain
				controlKV + "pin.*",           // tickctl pin / unpin
				controlKV + "weight.*",        // tickctl weight
				cmds,                          // tickctl instance create/send/end go through the owner, like a gateway's
				"tickfence.audit.>",           // tickctl records each action it runs in the audit stream
			},
			subAllow: []string{
				inbox,  // its own requests' replies
				frames, // tickctl instance watch
			},
		}
	case Effects:
		return perms{
			pubAllow: []string{
				jsAPI + "INFO",                                 // jetstream.AccountInfo
				jsAPI + "STREAM.INFO." + fxStream,              // open the effects stream (natscmd.ConsumeEffects)
				jsAPI + "CONSUMER.CREATE." + fxStream + ".>",   // its durable consumer, made or updated at start
				jsAPI + "CONSUMER.INFO." + fxStream + ".*",     // the consumer's state (pending effects)
				jsAPI + "CONSUMER.MSG.NEXT." + fxStream + ".*", // pull the next effects
				"$JS.ACK." + fxStream + ".>",                   // acknowledge an effect once applied
			},
			subAllow: []string{
				inbox, // its own requests' replies, and the pulled effects (delivered to its inbox)
			},
		}
	case Observer:
		return perms{
			pubAllow: []string{
				jsAPI + "INFO",                // jetstream.AccountInfo when the store opens
				jsAPI + "STREAM.INFO.*",       // open buckets, partitions' streams
				dataDirAll,                    // read every key
				jsAPI + "STREAM.MSG.GET.*",    // KV Get on the data buckets (their stream, updated for atomic batches, answers no direct get)
				jsAPI + "CONSUMER.CREATE.*.>", // list keys (ordered consumers): tickctl shards, instances
				jsAPI + "CONSUMER.DELETE.*.*", // a listing's consumer goes when it is done
				flowCtl,                       // flow control of object reads (a record whose state is a blob)
			},
			subAllow: []string{
				inbox,  // its own requests' replies
				frames, // watch frames (display only)
			},
		}
	}
	return perms{}
}
