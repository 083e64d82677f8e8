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
// stream"; where a role needs only the control bucket, it is named, and the streams a `*` must
// not reach (the effects and audit streams' consumers) are denied by name.
//
// Only admin shapes storage (DESIGN 9): no other role may create, update or delete a stream, so
// none can republish or mirror into subjects it may not publish, capture commands, or reconfigure
// a bucket; an admin makes the cluster's streams first (tickctl cluster init, package
// clusterinit). What subject permissions cannot see, and so no role's list can refuse:
//   - a consumer's deliver subject (a push consumer delivers where its config says, whoever made
//     it: nats-server issue 8274). A delivery keeps its stored subject and reaches only a literal
//     subscription of the deliver subject, so it cannot be taken for a command, a KV write or a
//     JetStream API request (all wildcard subscriptions); a frame watcher drops a message whose
//     subject is not the frame's (natscmd.Client.Watch). The effects and audit streams take no
//     consumer but the effects role's and admin's.
//   - a consumer's durability: $JS.API.CONSUMER.CREATE.<stream>.<name> makes a durable consumer
//     as well as an ephemeral one (ordered consumers, every KV watch, use it). Where another's
//     durable lives (the effects stream) creating and deleting are denied.
//   - headers: a publish with Nats-Rollup purges the subject (sub) or the stream (all). Every
//     bucket refuses roll-ups (their streams' AllowRollup is off): the data buckets, the control
//     bucket (its leases expire without delete markers, which would need roll-ups) and the blobs
//     bucket (an Object Store's put rolls its meta up; tickfence writes each object once without
//     one, and deletes by purge, admin's: package natskv, blob.go).

// Stream and bucket names of the storage layout (DESIGN 3), as subject tokens.
const (
	controlKV   = "$KV.tickfence-control." // control bucket keys
	blobsO      = "$O.tickfence-blobs.>"   // its chunk and meta subjects
	cmds        = "tickfence.cmd.>"        // commands of trusted senders (DESIGN 5)
	playCmds    = "tickfence.play.>"       // players' commands, the player named by the last token (DESIGN 9)
	opReqs      = "tickfence.op.>"         // operators' requests to the owner of a shard (reload a failed instance); not exported to the players' account
	frames      = "tickfence.out.>"        // frames (DESIGN 8)
	privFrames  = "tickfence.to.>"         // frames for one player each: tickfence.to.<S>.<id>.<player>[.<topic>] (wire.PrivateFrameSubject)
	fxSubj      = "tickfence.fx.>"         // effects' subjects
	fxStream    = "tickfence-effects"      // the effects stream (natscmd.EffectsStream)
	auditStream = AuditStream              // tickctl's audit stream
	jsAPI       = "$JS.API."               // JetStream API prefix
	flowCtl     = "$JS.FC.>"               // flow-control answers of ordered push consumers (object reads)
	dataShards  = "$KV.*.shard.*"          // shard.<S> of the data buckets of every epoch
	dataInsts   = "$KV.*.inst.>"           // inst.<S>.<id> of the data buckets of every epoch
	dataDirAll  = "$JS.API.DIRECT.GET.*.>" // KV Get on a bucket whose stream allows direct gets (the control bucket)
)

// foreignConsumers are the consumer rights a role with CONSUMER.CREATE.*.> (node, operator,
// observer: ordered consumers on the buckets) has no use for: consumers of the effects stream
// (the effects services' durable ones: reconfigured or deleted, a game's loot stops) and of the
// audit stream (tickctl audit reads it by sequence). A consumer's deliver subject is no
// permission's to check (see above): these are the streams whose contents one of these roles
// writes, or whose consumers belong to someone else.
var foreignConsumers = []string{
	jsAPI + "CONSUMER.CREATE." + fxStream + ".>",
	jsAPI + "CONSUMER.DELETE." + fxStream + ".*",
	jsAPI + "CONSUMER.CREATE." + auditStream + ".>",
	jsAPI + "CONSUMER.DELETE." + auditStream + ".*",
}

// perms is one role's permission lists (the user JWT's pub/sub allow and deny lists, and
// whether it may answer requests it received).
type perms struct {
	pubAllow, pubDeny, subAllow, subDeny []string
	// responses lets the user publish one reply to the reply subject of each request it
	// received (NATS allow_responses). No role has it: the server lets a responder publish there
	// whatever its own permissions deny, so a requester could aim a node's answer at any subject
	// (the confused deputy of DESIGN 9). Nodes answer with the narrow rights of their pubAllow.
	responses bool
	// subs and payload, if not 0, bound the user's subscriptions and each message's size (a
	// player's: the server refuses more, whatever the player's client does).
	subs, payload int64
}

// A player's limits: its replies' inbox and a few watches; one command (store.MaxCommandBytes)
// with its headers.
const (
	PlayerMaxSubs    = 32
	PlayerMaxPayload = 2 * store.MaxCommandBytes
)

// rolePerms is the permissions of role r for the user named name (its inbox prefix is
// InboxPrefix(name)).
func rolePerms(r Role, name string, trusted bool) perms {
	inbox := InboxPrefix(name) + ".>" // replies to this user's own requests (nats.CustomInboxPrefix)
	switch r {
	case Node:
		// A node credential of its own (tickctl auth user DIR node n1) writes only its own
		// lease, node.n1; the shared node.creds of Init (user "node") any node's.
		lease := controlKV + "node." + name
		if name == string(Node) {
			lease = controlKV + "node.*"
		}
		// A node is data-plane only (DESIGN 9): it opens the buckets and streams an admin made
		// (tickctl cluster init) and creates, updates, deletes or purges none.
		return perms{
			pubAllow: []string{
				jsAPI + "INFO",                // jetstream.AccountInfo when the store opens
				jsAPI + "STREAM.INFO.*",       // open a bucket (KeyValue/ObjectStore), the partitions' streams
				jsAPI + "STREAM.MSG.GET.*",    // KV Get on the data buckets (their stream, made for atomic batches, answers no direct get)
				dataDirAll,                    // KV Get: every bucket's last value by subject
				jsAPI + "CONSUMER.CREATE.*.>", // KV watches and key listings (ordered consumers), object reads
				jsAPI + "CONSUMER.DELETE.*.*", // ordered consumers are deleted when a watch stops
				flowCtl,                       // flow control of object reads (large state: ordered push consumers)
				dataShards,                    // KV puts on shard.<S>: token rotations, the coordinator's grants
				dataInsts,                     // KV puts on inst.<S>.<id>: the fenced records, tombstones
				lease,                         // its lease (per-message TTL), renewed and deleted when it leaves
				controlKV + store.LeaderKey,   // the coordinator's lease: candidates create it, the leader renews it
				controlKV + "move.*",          // the coordinator requests hand-offs, the old owner answers them
				blobsO,                        // large state uploaded before the record that points at it
				fxSubj,                        // effects, published after the write that holds them
				frames,                        // frames after each tick
				privFrames,                    // and those for one player (actor.Frames.PublishTo)
				cmds,                          // Node.Client: the program's own players and bots (tickd's demo) send commands; a node runs the instances' logic anyway
				"_R_.>",                       // answers to commands from the players' account: the server's response subjects of requests that crossed accounts
				"_INBOX.*.cmd.>",              // answers to commands from this account (tickctl, its own players): natscmd.Client's command inboxes, not anyone's JetStream replies
			},
			pubDeny: append([]string{
				controlKV + store.ClusterKey, // the cluster record is admin's (tickctl cluster init, restore)
				controlKV + "drain.*",        // the operator's placement inputs are not a node's to write
				controlKV + "pin.*",          //
				controlKV + "weight.*",       //
				controlKV + "restore",        // a restore's claim is the admin's
				controlKV + "shard.*",        // $KV.*.shard.* and $KV.*.inst.> are for the data buckets: no such key in the control bucket
				controlKV + "inst.>",         //
				jsAPI + "STREAM.DELETE.>",    // never delete a bucket (DESIGN 9): nor create, update or purge one (none allowed)
			}, foreignConsumers...),
			subAllow: []string{
				cmds,     // serve commands of the shards it owns
				playCmds, // and its players' commands
				opReqs,   // and operators' requests about them (tickctl instance reload)
				inbox,    // its own requests' replies: JetStream API, KV acknowledgements, watches' deliveries
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
		// In the players' account (Init): tickfence.cmd.>, tickfence.play.> and tickfence.out.> are
		// its imports of the trusted account's command services and frames, and nothing else is there.
		if !trusted {
			// A player: its commands only on its own subject, so that the subject — which the
			// server authorises — says who sent them, whatever the message's headers say.
			return perms{
				pubAllow: []string{
					"tickfence.play.*.*." + name, // its commands: tickfence.play.<S>.<id>.<name> (wire.PlayerSubject)
				},
				subAllow: append([]string{
					inbox,  // its own commands' replies, and nobody else's
					frames, // watch instances' public frames
				}, ownFrames(name)...),
				subs: PlayerMaxSubs, payload: PlayerMaxPayload,
			}
		}
		return perms{
			pubAllow: []string{
				cmds, // send commands as a trusted sender, naming the player it acts for (DESIGN 5, 9)
			},
			subAllow: []string{
				inbox,      // its own commands' replies, and nobody else's
				frames,     // watch instances' frames
				privFrames, // and each player's own, to relay them to it
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
				opReqs,                        // tickctl instance reload: a request to the owner, answered by the node (never the game)
				"tickfence.audit.>",           // tickctl records each action it runs in the audit stream
			},
			pubDeny: foreignConsumers,
			subAllow: []string{
				inbox,      // its own requests' replies
				frames,     // tickctl instance watch
				privFrames, // tickctl instance watch --player
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
			pubDeny: foreignConsumers,
			subAllow: []string{
				inbox,      // its own requests' replies
				frames,     // watch frames (display only)
				privFrames, // a player's too
			},
		}
	}
	return perms{}
}

// ownFrames are the subjects of a player's own frames, the only ones of tickfence.to it may
// subscribe: tickfence.to.<S>.<id>.<name> and tickfence.to.<S>.<id>.<name>.<topic>. Its name is a
// literal token of both, so no subscription it may make matches another player's: NATS checks a
// subscription's subject against the allow list token by token, and a wildcard of the
// subscription meets a literal name only as the same literal (tickfence.to.>, tickfence.to.*.>
// and tickfence.to.*.*.* are refused: TestPlayerSeesOnlyItsOwnFrames). Private frames have a prefix
// of their own for that reason: below tickfence.out, which a player may subscribe whole
// (tickfence.out.>), any wildcard it may use would reach them.
func ownFrames(name string) []string {
	return []string{"tickfence.to.*.*." + name, "tickfence.to.*.*." + name + ".*"}
}
