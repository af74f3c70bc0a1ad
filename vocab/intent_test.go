package vocab_test

import (
	"errors"
	"testing"

	"github.com/orrery-run/orrery/vocab"
)

func TestParseOriginRoundTripsWorldIdsWithAt(t *testing.T) {
	for _, o := range []vocab.Origin{{World: "a", Height: 0}, {World: "a@b", Height: 18446744073709551615}} {
		got, err := vocab.ParseOrigin(o.String())
		if err != nil || got != o {
			t.Fatalf("ParseOrigin(%q) = %v, %v", o.String(), got, err)
		}
	}
	for _, s := range []string{"", "a", "@1", "a@", "a@01", "a@-1", "a@x", "a@18446744073709551616"} {
		if _, err := vocab.ParseOrigin(s); !errors.Is(err, vocab.ErrOrigin) {
			t.Fatalf("ParseOrigin(%q): %v, want ErrOrigin", s, err)
		}
	}
}

func TestReceiptStatusValidIsTheThreeStatuses(t *testing.T) {
	for _, s := range []vocab.ReceiptStatus{vocab.ReceiptOK, vocab.ReceiptError, vocab.ReceiptTimeout} {
		if !s.Valid() {
			t.Errorf("%q not valid", s)
		}
	}
	for _, s := range []vocab.ReceiptStatus{"", "OK", "maybe", "done"} {
		if s.Valid() {
			t.Errorf("%q valid", s)
		}
	}
}

func TestClaimOfIsTheLatestClaim(t *testing.T) {
	it := vocab.EffectItem{ClaimedBy: "w-1", Attempt: 3}
	if got := it.ClaimOf(); got != (vocab.Claim{Worker: "w-1", Attempt: 3}) {
		t.Fatalf("ClaimOf = %+v", got)
	}
}
