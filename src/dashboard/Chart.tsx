// One zoomable line chart, drawn by uPlot (about 22 kB gzipped, canvas, made for long time
// series) in the colours of the JupyterLab theme. Drag across to zoom; double-click resets.
import React, { useEffect, useRef } from 'react';
import uPlot from 'uplot';

import { wholeNumber } from '../vocabulary';

export interface IChartSeries {
  label: string;
  /** A JupyterLab CSS variable for the line's colour, e.g. '--jp-brand-color1'. */
  colour: string;
  /** A value as the axis and legend show it. */
  format?: (value: number) => string;
}

export interface IChartProps {
  title: string;
  /** [x values, then one array of values (or null: a gap) per series], x ascending. */
  data: uPlot.AlignedData;
  series: IChartSeries[];
  /** x is epoch seconds (a time axis) rather than a step. */
  time: boolean;
  yRange?: [number, number];
  /** A logarithmic value axis (the values must be positive). */
  log?: boolean;
  /** Changes when the theme does: the chart is drawn anew in its colours. */
  theme: number;
  testId?: string;
  height?: number;
}

function cssColour(name: string, fallback: string): string {
  const value = getComputedStyle(document.body).getPropertyValue(name).trim();
  return value || fallback;
}

/** An epoch time as the clock on the wall: "14:05:09". */
function timeOfDay(value: number): string {
  return new Date(value * 1000).toLocaleTimeString(undefined, {
    hour: '2-digit',
    minute: '2-digit',
    second: '2-digit'
  });
}

/** The legend's value of a series: the point under the cursor, and while the cursor is away the
 * newest value (uPlot would show "--" then, which tells nothing), so the legend always reads
 * "step 1,200 · loss 0.0213". A gap under the cursor is "—". */
function legendValue(format: (value: number) => string) {
  return (u: uPlot, value: number | null, seriesIndex: number, index: number | null): string => {
    if (index === null) {
      const values = u.data[seriesIndex] as Array<number | null | undefined>;
      for (let k = values.length - 1; k >= 0; k--) {
        const v = values[k];
        if (v !== null && v !== undefined) {
          return format(v);
        }
      }
      return '—';
    }
    return value === null || value === undefined ? '—' : format(value);
  };
}

export function Chart(props: IChartProps): JSX.Element {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  // Set while the user has zoomed in: new data then keeps their view instead of rescaling.
  const zoomed = useRef(false);
  const height = props.height ?? 180;
  const layout = props.series.map(s => s.label + s.colour).join('|');

  useEffect(() => {
    const target = box.current;
    if (!target) {
      return;
    }
    const text = cssColour('--jp-ui-font-color2', '#666');
    const grid = cssColour('--jp-border-color2', '#ddd');
    const axis = { stroke: text, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid } };
    const options: uPlot.Options = {
      title: props.title,
      width: Math.max(200, target.clientWidth),
      height,
      scales: {
        x: { time: props.time },
        y: props.yRange ? { range: props.yRange } : props.log ? { distr: 3 } : {}
      },
      axes: [
        { ...axis },
        {
          ...axis,
          size: 70,
          values: props.yRange ? (_u, values) => values.map(v => `${v}%`) : undefined
        }
      ],
      series: [
        {
          label: props.time ? 'time' : 'step',
          value: legendValue(props.time ? timeOfDay : wholeNumber)
        },
        ...props.series.map(s => ({
          label: s.label,
          stroke: cssColour(s.colour, '#1976d2'),
          width: 1.5,
          spanGaps: false,
          value: legendValue(s.format ?? (v => v.toPrecision(4)))
        }))
      ],
      cursor: { drag: { x: true, y: false } },
      hooks: {
        setSelect: [
          () => {
            zoomed.current = true;
          }
        ]
      }
    };
    const chart = new uPlot(options, props.data, target);
    plot.current = chart;
    const reset = () => {
      zoomed.current = false;
    };
    chart.over.addEventListener('dblclick', reset);
    const resize = new ResizeObserver(() => {
      chart.setSize({ width: Math.max(200, target.clientWidth), height });
    });
    resize.observe(target);
    return () => {
      resize.disconnect();
      chart.over.removeEventListener('dblclick', reset);
      chart.destroy();
      plot.current = null;
    };
  }, [props.theme, props.title, layout, props.time, props.log, height]);

  useEffect(() => {
    plot.current?.setData(props.data, !zoomed.current);
  }, [props.data]);

  return <div className="jp-gpuws-chart" ref={box} data-testid={props.testId} />;
}
