package dispatch_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/actor/dispatch"
)

func Example() {
	rt := dispatch.New(actor.NewExecutor(1), dispatch.WithLogger(nil))
	done := make(chan struct{})
	_ = rt.Register("greet", func(_ context.Context, m dispatch.Message) error {
		fmt.Println("hello,", m.Payload)
		return nil
	})
	_ = rt.Register("fail", func(context.Context, dispatch.Message) error {
		return errors.New("logged and counted; the sender never sees it")
	})
	_ = rt.Register("done", func(context.Context, dispatch.Message) error {
		close(done)
		return nil
	})

	_ = rt.Deliver(dispatch.Message{Type: "greet", Payload: "world"}) // waits for Start
	rt.Start()
	_ = rt.Deliver(dispatch.Message{Type: "fail"})
	_ = rt.Deliver(dispatch.Message{Type: "nobody-handles-this"}) // dropped silently
	_ = rt.Deliver(dispatch.Message{Type: "done"})
	<-done
	_ = rt.Stop(context.Background())

	s := rt.Stats()
	fmt.Printf("executed %d, failed %d, dropped %d\n", s.Executed, s.Failed, s.Dropped)
	// Output:
	// hello, world
	// executed 3, failed 1, dropped 1
}
