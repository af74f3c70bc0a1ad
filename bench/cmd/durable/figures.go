package main

import (
	"context"

	"github.com/orrery-run/orrery/store"
)

func runFigures(ctx context.Context, st store.Store) {}
