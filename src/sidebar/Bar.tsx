import React from 'react';

/** A labelled horizontal gauge; turns amber then red as it fills. */
export function Bar(props: {
  label: string;
  value: number | null;
  text: string;
  testId?: string;
}): JSX.Element {
  const value = props.value === null ? 0 : Math.max(0, Math.min(100, props.value));
  const level = value >= 95 ? 'critical' : value >= 80 ? 'high' : 'normal';
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
