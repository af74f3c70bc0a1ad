package ledger_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/orrery-run/orrery/examples/ledger"
	"github.com/orrery-run/orrery/orrerytest"
	"github.com/orrery-run/orrery/world"
)

// FuzzAccountInputs drives one account with any sequence of its inputs,
// amounts included (zero, negative, huge), read from the fuzzer's bytes
// three at a time. Whatever the sequence, the kernel never fails on its
// own, a failed step changes nothing, the balance is exactly what the
// successful steps say, the holds never promise more than the balance, and
// they stay sorted and one per transfer.
func FuzzAccountInputs(f *testing.F) {
	f.Add([]byte{0, 0, 5, 1, 0, 3, 3, 1, 2, 6, 1, 0})
	f.Add([]byte{1, 0, 255, 3, 0, 200, 3, 1, 200, 5, 0, 0, 4, 0, 0, 6, 1, 0})
	f.Add([]byte{4, 2, 0, 3, 2, 10, 0, 0, 1, 2, 0, 128})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, ops []byte) {
		a := orrerytest.NewKernel(t, ledger.AccountDef(), "fz")
		var balance int64
		for len(ops) >= 3 {
			op, tr, amt := ops[0]%7, fmt.Sprintf("t%d", ops[1]%4), int64(int8(ops[2]))*7
			ops = ops[3:]
			before := a.State()
			var in any
			switch op {
			case 0:
				in = ledger.Open{Owner: "o", AuditURL: "https://audit.example/", AuditAbove: amt}
			case 1:
				in = ledger.Deposit{Amount: amt, Ref: tr}
			case 2:
				in = ledger.Withdraw{Amount: amt, Ref: tr}
			case 3:
				in = ledger.Hold{Transfer: tr, Amount: amt}
			case 4:
				in = ledger.Release{Transfer: tr}
			case 5:
				in = ledger.Capture{Transfer: tr}
			case 6:
				in = ledger.Balance{}
			}
			res := a.Event(in)
			after := a.State()
			if res.Outcome != world.OutcomeOK {
				if fmt.Sprint(after) != fmt.Sprint(before) {
					t.Fatalf("%T failed (%v) and changed the state", in, res.Err)
				}
				continue
			}
			switch m := in.(type) {
			case ledger.Deposit:
				balance += m.Amount
			case ledger.Withdraw:
				balance -= m.Amount
			case ledger.Capture:
				h, _ := before.HoldFor(m.Transfer)
				balance -= h.Amount
			}
			if after.Balance != balance {
				t.Fatalf("after %T%+v: balance %d, the steps say %d", in, in, after.Balance, balance)
			}
			if after.Available() < 0 || after.Held() < 0 {
				t.Fatalf("after %T%+v: available %d, held %d", in, in, after.Available(), after.Held())
			}
			if !slices.IsSortedFunc(after.Holds, func(x, y ledger.Hold) int { return strings.Compare(x.Transfer, y.Transfer) }) {
				t.Fatalf("holds unsorted: %v", after.Holds)
			}
			for i := 1; i < len(after.Holds); i++ {
				if after.Holds[i].Transfer == after.Holds[i-1].Transfer {
					t.Fatalf("two holds for %s", after.Holds[i].Transfer)
				}
			}
		}
	})
}
