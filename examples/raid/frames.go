package main

import "github.com/vmihailenco/msgpack/v5"

// What the raid shows. Frames are display only: published after their tick, never stored (a
// failover may show a tick again), at most 64 KiB each — so the terrain goes out as the
// squares each breath scorched, never whole.

// BossFrame is the public frame (the main topic) every FrameEvery ticks: what every watcher sees.
type BossFrame struct {
	Tick     uint64     `msgpack:"tick"`
	Run      int        `msgpack:"run"`
	HP       int        `msgpack:"hp"`
	MaxHP    int        `msgpack:"max_hp"`
	Phase    int        `msgpack:"phase"`
	Scorched int        `msgpack:"scorched"`
	Heroes   []HeroView `msgpack:"heroes"`
}

// HeroView is a hero as everyone sees it.
type HeroView struct {
	Name  string `msgpack:"name"`
	Class string `msgpack:"class"`
	HP    int    `msgpack:"hp"`
	Dealt int    `msgpack:"dealt"`
}

// HUD is one hero's own frame (topic "hud", to that player only): its cooldowns and position.
type HUD struct {
	Tick      uint64     `msgpack:"tick"`
	HP        int        `msgpack:"hp"`
	X         int        `msgpack:"x"`
	Y         int        `msgpack:"y"`
	Burning   bool       `msgpack:"burning"`
	DownUntil uint64     `msgpack:"down_until"`
	Abilities []ReadyAbl `msgpack:"abilities"`
}

// ReadyAbl is an ability in a HUD and the tick it is ready at.
type ReadyAbl struct {
	Name    string `msgpack:"name"`
	ReadyAt uint64 `msgpack:"ready_at"`
}

// Scorch is a breath's square (topic "scorch"): a client draws the terrain from these.
type Scorch struct {
	X    int `msgpack:"x"`
	Y    int `msgpack:"y"`
	Size int `msgpack:"size"`
}

// show publishes the boss frame for everyone and each hero's HUD for that hero only.
func (r *Raid) show(tick uint64) {
	f := BossFrame{Tick: tick, Run: r.Boss.Run, HP: r.Boss.HP, MaxHP: r.Boss.MaxHP, Phase: r.Boss.Phase(), Scorched: r.Boss.Scorched}
	for _, h := range r.Heroes {
		f.Heroes = append(f.Heroes, HeroView{Name: h.Name, Class: Classes[h.Class].Name, HP: h.HP, Dealt: h.Dealt})
		hud := HUD{Tick: tick, HP: h.HP, X: h.X, Y: h.Y, Burning: r.Terrain[h.Y*W+h.X] != 0, DownUntil: h.DownUntil}
		for i, a := range Classes[h.Class].Abilities {
			hud.Abilities = append(hud.Abilities, ReadyAbl{Name: a.Name, ReadyAt: h.Ready[i]})
		}
		r.publishTo(h.Name, "hud", hud)
	}
	r.publish("", f)
}

// event tells every watcher what happened (topic "events").
func (r *Raid) event(text string) { r.publish("events", text) }

// publish and publishTo ignore Publish's error: a frame is display only, so a refused one (a bad
// topic, over 64 KiB) stops nothing; the node logs it and counts it, and actortest fails the
// test that makes one.
func (r *Raid) publish(topic string, v any) {
	b, _ := msgpack.Marshal(v)
	_ = r.Publish(topic, b)
}

func (r *Raid) publishTo(player, topic string, v any) {
	b, _ := msgpack.Marshal(v)
	_ = r.PublishTo(player, topic, b)
}

// Status is the answer to {"type":"status"}.
type Status struct {
	Run      int        `msgpack:"run"`
	BossHP   int        `msgpack:"boss_hp"`
	Phase    int        `msgpack:"phase"`
	Scorched int        `msgpack:"scorched"`
	Heroes   []HeroView `msgpack:"heroes"`
}

func (r *Raid) status() Status {
	s := Status{Run: r.Boss.Run, BossHP: r.Boss.HP, Phase: r.Boss.Phase(), Scorched: r.Boss.Scorched}
	for _, h := range r.Heroes {
		s.Heroes = append(s.Heroes, HeroView{Name: h.Name, Class: Classes[h.Class].Name, HP: h.HP, Dealt: h.Dealt})
	}
	return s
}
