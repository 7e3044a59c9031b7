package main

import (
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"math"
)

var (
	colorNATS = color.RGBA{0x37, 0x6f, 0xb0, 0xff}
	colorQMQ  = color.RGBA{0xe0, 0x7b, 0x22, 0xff}
	colorText = color.RGBA{0x20, 0x20, 0x20, 0xff}
	colorRule = color.RGBA{0xd0, 0xd0, 0xd0, 0xff}
)

// Chart geometry, in pixels.
const (
	chartWidth  = 1000
	chartTop    = 50  // the legend above the rows
	chartLeft   = 190 // the labels' column
	chartBarMax = 600 // the longer bar of a row
	barHeight   = 14
	rowHeight   = 2*barHeight + 16
	textScale   = 2
)

// writeChart draws a horizontal bar chart: for every row measured on both
// systems a NATS bar and a qmq bar, scaled to the larger of the two (rows
// have different units), each with its figure at its end.
func writeChart(w io.Writer, ls []line) error {
	var shown []line
	for _, l := range ls {
		if !math.IsNaN(l.nats) || !math.IsNaN(l.qmq) {
			shown = append(shown, l)
		}
	}
	height := chartTop + len(shown)*rowHeight + 10
	img := image.NewRGBA(image.Rect(0, 0, chartWidth, height))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)

	// Legend.
	fill(img, 10, 14, 20, barHeight, colorNATS)
	drawText(img, 36, 14, "NATS JETSTREAM", textScale, colorText)
	fill(img, 240, 14, 20, barHeight, colorQMQ)
	drawText(img, 266, 14, "QMQ", textScale, colorText)
	drawText(img, 340, 14, "EACH ROW SCALED TO ITS LARGER FIGURE", textScale, colorText)

	for i, l := range shown {
		y := chartTop + i*rowHeight
		fill(img, 0, y-4, chartWidth, 1, colorRule)
		drawText(img, 8, y+barHeight-glyphH, l.row.short, textScale, colorText)
		top := max(nanToZero(l.nats), nanToZero(l.qmq))
		for k, v := range []float64{l.nats, l.qmq} {
			c := colorNATS
			if k == 1 {
				c = colorQMQ
			}
			by := y + k*(barHeight+2)
			n := 0
			if !math.IsNaN(v) && top > 0 {
				n = int(math.Round(v / top * chartBarMax))
			}
			fill(img, chartLeft, by, n, barHeight, c)
			label := fmtValue(v, l.row.unit)
			if math.IsNaN(v) {
				label = "NOT MEASURED"
			}
			drawText(img, chartLeft+n+6, by, label+" "+chartUnit(l.row.unit), 1, colorText)
		}
	}
	return png.Encode(w, img)
}

func chartUnit(u string) string {
	if u == "msgs/s" {
		return "MSGS/S"
	}
	return u
}

func nanToZero(v float64) float64 {
	if math.IsNaN(v) {
		return 0
	}
	return v
}

func fill(img *image.RGBA, x, y, w, h int, c color.Color) {
	draw.Draw(img, image.Rect(x, y, x+w, y+h), &image.Uniform{c}, image.Point{}, draw.Src)
}
