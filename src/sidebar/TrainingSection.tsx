import React from 'react';

import { ITrainingRun } from '../api';
import { TrainingModel } from '../training/model';
import { etaText, runLevel, stepText } from '../training/words';
import { shortPath } from '../vocabulary';
import { Bar } from './Bar';
import { EmptyState } from './EmptyState';
import { Sparkline } from './Sparkline';

/**
 * The panel's Training section: one card per tracked run (step / total with a progress bar,
 * ETA, the verdict against the runtime's deadline, a sparkline of the loss, open anomalies).
 * Self-contained: give it the model (and how to open the dashboard) and place it in the panel.
 */
export function TrainingSection(props: { model: TrainingModel }): JSX.Element {
  const { model } = props;
  const runs = model.runs;
  return (
    <div data-testid="gpuws-training">
      {model.error && <div className="jp-gpuws-message jp-gpuws-error">{model.error}</div>}
      {runs.length === 0 ? (
        <EmptyState
          text="No tracked run"
          title="In the loop: gpuws.step(i, loss=loss), and gpuws.progress(total=N) for the ETA against the runtime left"
          snippet={TRAINING_SNIPPET}
          docs="training.md"
          testId="gpuws-training-empty"
        />
      ) : (
        runs.map(run => <RunCard key={run.run} run={run} />)
      )}
    </div>
  );
}

// README's step 4 as it is, %load_ext first (without it the kernel has no agent, and the steps
// reach nothing): pasted into an empty cell, it tracks, resumes and steps with the names it
// defines, and runs for some seconds so that the panel's progress shows.
export const TRAINING_SNIPPET = `%load_ext jupyter_gpu_ws
import time

import jupyter_gpu_ws as gpuws

num_steps = 200
state = {"epoch": 0}
gpuws.track(state=state, total_steps=num_steps)  # or model=model, optimizer=opt
start = gpuws.resume()  # 0 the first time, where it stopped after that
for i in range(start, num_steps):
    time.sleep(0.1)  # your training step here: this loop runs ~20 s
    loss = 1 / (i + 1)
    state["epoch"] = i // 50
    gpuws.step(i, loss=loss)`;

function RunCard(props: { run: ITrainingRun }): JSX.Element {
  const { run } = props;
  const progress = run.total && run.done_steps !== null ? (100 * run.done_steps) / run.total : null;
  const eta = etaText(run);
  const points = run.sparkline.filter((p): p is [number, number] => p[1] !== null);
  return (
    <div
      className={`jp-gpuws-card jp-gpuws-training-${runLevel(run)}`}
      data-testid="gpuws-training-run"
    >
      <div className="jp-gpuws-card-title" title={run.run}>
        {shortPath(run.notebook ?? run.run)}
        <span className="jp-gpuws-subtle"> · {run.state}</span>
      </div>
      <Bar
        label={stepText(run)}
        value={progress}
        text={[run.rate ? `${run.rate.toPrecision(3)}/s` : null, eta].filter(Boolean).join(' · ')}
        testId="gpuws-training-progress"
      />
      {run.verdict?.message && (
        <div
          className={`jp-gpuws-verdict jp-gpuws-status-${runLevel(run)}`}
          data-testid="gpuws-training-verdict"
        >
          {run.verdict.message}
        </div>
      )}
      {points.length > 1 && <LossSparkline points={points} />}
      {run.anomalies.map(a => (
        <div
          key={a.id}
          className={`jp-gpuws-message jp-gpuws-anomaly jp-gpuws-anomaly-${a.level}`}
          title={a.advice}
        >
          {a.message}
        </div>
      ))}
    </div>
  );
}

/** The loss over the whole run (the server spreads its points over it), scaled to its own range
 * (the Sparkline draws 0–100). */
function LossSparkline(props: { points: Array<[number, number]> }): JSX.Element {
  const values = props.points.map(p => p[1]);
  const low = Math.min(...values);
  const high = Math.max(...values);
  const span = high - low || 1;
  const first = props.points[0][0];
  const last = props.points[props.points.length - 1][0];
  return (
    <Sparkline
      series={[
        {
          name: 'loss',
          className: 'jp-gpuws-sparkline-loss',
          points: props.points.map(([step, value]) => [step, (100 * (value - low)) / span])
        }
      ]}
      seconds={Math.max(1, last - first)}
      now={last}
      title={`loss from ${low.toPrecision(3)} to ${high.toPrecision(3)} over steps ${first}–${last}`}
    />
  );
}
