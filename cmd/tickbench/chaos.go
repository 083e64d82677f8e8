package main

import "errors"

func runChaos(args []string) error { return errors.New("not yet") }
