// Command quickstart is the README's tutorial: one durable world type, a
// guestbook, run by the whole orrery command line (serve, world, journal,
// ...) through orrery.Main.
//
//	go run ./examples/quickstart serve --store guestbook.db
//	go run ./examples/quickstart world create lobby --universe guestbook
//	go run ./examples/quickstart world send lobby Sign '{"Name":"Ada"}' --key ada
//	go run ./examples/quickstart world call lobby Count
package main

import (
	"time"

	"github.com/orrery-run/orrery"
	"github.com/orrery-run/orrery/world"
)

// Book is the world's state: canonical CBOR in the journal and snapshots.
type Book struct {
	Names     []string
	Reminders []string
}

// Sign adds a name. Count answers how many signed. Remind arms a durable
// timer that delivers Ring after AfterMs, even across crashes and moves.
type (
	Sign   struct{ Name string }
	Count  struct{}
	Remind struct {
		AfterMs int64
		Note    string
	}
	Ring struct{ Note string }
)

func (Sign) WorldType() string   { return "Sign" }
func (Count) WorldType() string  { return "Count" }
func (Remind) WorldType() string { return "Remind" }
func (Ring) WorldType() string   { return "Ring" }

// Guestbook is the world definition: a typed state and one handler per
// input type. Handlers are deterministic: time comes from c.Now (the
// input's journal time), side effects leave as intents.
func Guestbook() *world.Def[Book] {
	d := world.New[Book]("guestbook", 1)
	world.On(d, func(c *world.Ctx, b *Book, s Sign) error {
		b.Names = append(b.Names, s.Name)
		return nil
	})
	world.On(d, func(c *world.Ctx, b *Book, _ Count) error {
		c.Reply(len(b.Names))
		return nil
	})
	world.On(d, func(c *world.Ctx, b *Book, r Remind) error {
		c.SetTimer(c.Now().Add(time.Duration(r.AfterMs)*time.Millisecond), Ring{Note: r.Note})
		return nil
	})
	world.On(d, func(c *world.Ctx, b *Book, r Ring) error {
		b.Reminders = append(b.Reminders, r.Note)
		return nil
	})
	return d
}

func main() { orrery.Main(Guestbook().Kernel()) }
