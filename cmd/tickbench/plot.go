package main

func writePlot(path string, rep ticksReport) error { return nil }
