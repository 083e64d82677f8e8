package shard

import "github.com/tickfence/tickfence/actor"

// unstoredFrames are, per topic, the ticks of an instance's published frames that no message a
// watcher of that topic receives — a later frame of the topic, or a stored notice — has said are
// stored yet (oldest first). A stored notice leaves only when an acknowledged write makes one of
// them stored and the topic's next frame, which would say so, is not coming in time: a watcher
// showing only durable frames of any topic is never left waiting for a frame that is not coming,
// and an instance whose frames say it themselves sends none. A topic framed at least every
// noticeWait ticks is expected to frame again after the gap between its last two frames: its
// notice waits until that frame is overdue. Any other topic's goes at the first tick after the
// write's acknowledgement.
type unstoredFrames struct{ topics []topicTicks }

type topicTicks struct {
	topic     string
	ticks     []uint64
	last, gap uint64 // its last frame's tick, and the ticks between its last two frames
}

// noticeWait is the longest gap between a topic's frames for which its next frame, rather than a
// notice, says its ticks are stored: a durable watcher of it waits at most that long for it.
const noticeWait = 5

// maxUnstored bounds the ticks remembered per topic; past it the oldest is forgotten, and said
// stored with a later one (a message that says a later tick is stored says it of every earlier
// one); keptTopics, the topics whose entry stays when it holds none.
const (
	maxUnstored = 16
	keptTopics  = 4
)

// tick notes what a tick publishes — frames (nil: none) saying stored — and reports whether a
// stored notice is owed: stored covers a frame that no message of its topic said was stored. The
// notice is then taken as sent.
func (u *unstoredFrames) tick(tick, stored uint64, frames []actor.Frame) (notice bool) {
	for _, f := range frames {
		e := u.entry(f.Topic)
		if e.last == tick {
			continue // another frame of this tick and topic
		}
		if e.last != 0 && tick > e.last {
			e.gap = tick - e.last
		}
		e.last = tick
		e.said(stored)
		if tick > stored {
			if len(e.ticks) == maxUnstored {
				e.ticks = e.ticks[:copy(e.ticks, e.ticks[1:])]
			}
			e.ticks = append(e.ticks, tick)
		}
	}
	for i := range u.topics {
		e := &u.topics[i]
		if len(e.ticks) > 0 && e.ticks[0] <= stored && (e.gap == 0 || e.gap > noticeWait || tick >= e.last+e.gap) {
			notice = true
			break
		}
	}
	if notice {
		for i := range u.topics {
			u.topics[i].said(stored)
		}
	}
	if len(u.topics) > keptTopics { // topics used now and then (a departed player's) are let go of
		keep := u.topics[:0]
		for _, e := range u.topics {
			if len(e.ticks) > 0 {
				keep = append(keep, e)
			}
		}
		clear(u.topics[len(keep):])
		u.topics = keep
	}
	return notice
}

func (u *unstoredFrames) entry(topic string) *topicTicks {
	for i := range u.topics {
		if u.topics[i].topic == topic {
			return &u.topics[i]
		}
	}
	u.topics = append(u.topics, topicTicks{topic: topic})
	return &u.topics[len(u.topics)-1]
}

// said drops the ticks a message saying stored covers.
func (e *topicTicks) said(stored uint64) {
	i := 0
	for i < len(e.ticks) && e.ticks[i] <= stored {
		i++
	}
	if i > 0 {
		e.ticks = e.ticks[:copy(e.ticks, e.ticks[i:])]
	}
}
