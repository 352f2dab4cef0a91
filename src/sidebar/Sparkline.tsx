import React from 'react';

export interface ISeries {
  name: string;
  className: string;
  /** [time, value 0–100] pairs, oldest first. */
  points: Array<[number, number]>;
}

/** A small line chart of the last minutes, 0–100 on the vertical axis. */
export function Sparkline(props: {
  series: ISeries[];
  seconds: number;
  now: number;
  title: string;
}): JSX.Element {
  const width = 240;
  const height = 36;
  const start = props.now - props.seconds;
  const x = (t: number) => ((t - start) / props.seconds) * width;
  const y = (v: number) => height - (Math.max(0, Math.min(100, v)) / 100) * height;
  return (
    <svg
      className="jp-gpuws-sparkline"
      viewBox={`0 0 ${width} ${height}`}
      preserveAspectRatio="none"
      role="img"
      aria-label={props.title}
    >
      <title>{props.title}</title>
      {props.series.map(s => (
        <polyline
          key={s.name}
          className={s.className}
          fill="none"
          vectorEffect="non-scaling-stroke"
          points={s.points
            .filter(([t]) => t >= start)
            .map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`)
            .join(' ')}
        />
      ))}
    </svg>
  );
}
