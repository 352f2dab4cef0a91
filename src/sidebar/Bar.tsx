// The panel's gauges: one labelled bar, and the busy-and-memory pair of a GPU and the system.
import React from 'react';

import { percent, percentText, usage } from '../vocabulary';

/**
 * A labelled horizontal gauge. A capacity gauge (memory, disk) turns amber then red as it
 * fills; a busy gauge (utilisation, CPU) does not, since busy is what the user paid for.
 */
export function Bar(props: {
  label: string;
  value: number | null;
  text: string;
  capacity?: boolean;
  testId?: string;
}): JSX.Element {
  const value = props.value === null ? 0 : Math.max(0, Math.min(100, props.value));
  const level = !props.capacity
    ? 'normal'
    : value >= 95
      ? 'critical'
      : value >= 80
        ? 'high'
        : 'normal';
  return (
    <div className="jp-gpuws-bar" data-testid={props.testId}>
      <div className="jp-gpuws-bar-label">
        <span>{props.label}</span>
        <span className="jp-gpuws-bar-text">{props.text}</span>
      </div>
      <div
        className="jp-gpuws-bar-track"
        role="meter"
        aria-label={props.label}
        aria-valuemin={0}
        aria-valuemax={100}
        aria-valuenow={props.value === null ? undefined : Math.round(value)}
      >
        <div
          className={`jp-gpuws-bar-fill jp-gpuws-level-${level}`}
          style={{ width: `${value}%` }}
        />
      </div>
    </div>
  );
}

/** How busy a device is beside how full its memory is, the pair a GPU card and the System
 * section both draw: "Utilisation 47 %" over "Memory 39.9/80 GiB". */
export function BusyAndMemory(props: {
  /** The busy gauge's label: "Utilisation", "CPU (8 cores)". */
  label: string;
  busy: number | null;
  used: number | null;
  total: number | null;
  /** The test ids of the two gauges, busy then memory. */
  testIds: [string, string];
}): JSX.Element {
  const { used, total } = props;
  return (
    <>
      <Bar
        label={props.label}
        value={props.busy}
        text={percentText(props.busy)}
        testId={props.testIds[0]}
      />
      <Bar
        label="Memory"
        value={percent(used, total)}
        text={usage(used, total)}
        capacity
        testId={props.testIds[1]}
      />
    </>
  );
}
