// "Training and GPUs": a main-area tab with each run's scalars over steps and each GPU's
// utilisation and memory over time beside them. The curves come from the server (kept there and
// in the run's checkpoints), so a reload, or a new machine resuming the run, shows them whole.
import React, { useMemo } from 'react';
import { ReactWidget } from '@jupyterlab/ui-components';
import uPlot from 'uplot';

import { ISample, ITrainingHistory, ITrainingRun } from '../api';
import { MetricsModel } from '../metrics/model';
import { NoGpu } from '../sidebar/GpuSection';
import { TrainingHistoryModel, TrainingModel } from '../training/model';
import { etaText, runLevel, stepText } from '../training/words';
import { duration, shortPath } from '../vocabulary';
import { Watch } from '../watch';
import { Chart } from './Chart';

const LOG_KEY = 'jupyter_gpu_ws:dashboard-log';
const COLOURS = [
  '--jp-brand-color1',
  '--jp-warn-color1',
  '--jp-success-color1',
  '--jp-info-color1'
];

export class TrainingDashboard extends ReactWidget {
  constructor(
    readonly training: TrainingModel,
    readonly curves: TrainingHistoryModel,
    readonly metrics: MetricsModel
  ) {
    super();
    this.id = 'jp-gpuws-training-dashboard';
    this.addClass('jp-gpuws-dashboard');
    this.title.label = 'Training and GPUs';
    this.title.caption = 'Loss and scalars per run, GPU utilisation and memory over time';
    this.title.closable = true;
    this._log = localStorage.getItem(LOG_KEY) === 'true';
  }

  /** Redraw the charts in the new theme's colours. */
  themeChanged(): void {
    this._theme++;
    this.update();
  }

  dispose(): void {
    this.curves.dispose();
    super.dispose();
  }

  render(): JSX.Element {
    // Drawn anew when the runs, their curves or the GPU samples (for why there is no GPU) change.
    return (
      <Watch signals={[this.training.changed, this.curves.changed, this.metrics.changed]}>
        {() => this._view()}
      </Watch>
    );
  }

  private _view(): JSX.Element {
    return (
      <DashboardView
        runs={newestFirst(this.training.runs)}
        history={this.curves.history}
        sample={this.metrics.latest}
        error={this.curves.error ?? this.training.error}
        selected={this._selected}
        theme={this._theme}
        log={this._log}
        onLog={log => {
          this._log = log;
          localStorage.setItem(LOG_KEY, String(log));
          this.update();
        }}
        onSelect={run => {
          this._selected = run;
          this.update();
        }}
      />
    );
  }

  // The run chosen in the picker while this tab is open; it opens on the newest run.
  private _selected: string | null = null;
  private _theme = 0;
  private _log: boolean;
}

/** The runs, the one that last stepped first (a run that never stepped last). */
export function newestFirst(runs: ITrainingRun[]): ITrainingRun[] {
  return [...runs].sort((a, b) => (b.last_time ?? 0) - (a.last_time ?? 0));
}

/** A scalar in the legend and on the axis: four significant digits, no trailing zeros ("0.0213"). */
function scalarText(value: number): string {
  return String(Number(value.toPrecision(4)));
}

function DashboardView(props: {
  runs: ITrainingRun[];
  history: ITrainingHistory | null;
  sample: ISample | null;
  error: string | null;
  selected: string | null;
  theme: number;
  log: boolean;
  onLog: (log: boolean) => void;
  onSelect: (run: string) => void;
}): JSX.Element {
  const { runs, history } = props;
  const names = runs.map(r => r.run);
  const current =
    props.selected && names.includes(props.selected) ? props.selected : (names[0] ?? null);
  const run = runs.find(r => r.run === current) ?? null;
  const series = current && history ? history.runs[current]?.series : undefined;
  return (
    <div className="jp-gpuws-dashboard-body" data-testid="gpuws-dashboard">
      <header className="jp-gpuws-dashboard-header">
        <h2>Training and GPUs</h2>
        {names.length > 0 && (
          <select
            className="jp-mod-styled jp-gpuws-run-picker"
            data-testid="gpuws-dashboard-run"
            value={current ?? ''}
            onChange={event => props.onSelect(event.target.value)}
            aria-label="Run"
          >
            {runs.map(r => (
              <option key={r.run} value={r.run}>
                {shortPath(r.run)} ({r.state})
              </option>
            ))}
          </select>
        )}
        <label
          className="jp-gpuws-dashboard-log"
          title="A logarithmic axis for scalars that stay positive (the loss, mostly)"
        >
          <input
            type="checkbox"
            data-testid="gpuws-dashboard-log"
            checked={props.log}
            onChange={event => props.onLog(event.target.checked)}
          />{' '}
          log scale
        </label>
      </header>
      {props.error && <div className="jp-gpuws-message jp-gpuws-error">{props.error}</div>}
      {run && <RunSummary run={run} />}
      <div className="jp-gpuws-dashboard-grid">
        <section aria-label="Training curves">
          {!current ? (
            <div className="jp-gpuws-subtle jp-gpuws-hint">
              No training run yet. In a notebook: <code>gpuws.progress(total=N)</code> or{' '}
              <code>gpuws.track(model=model, optimizer=opt, total_steps=N)</code>, then{' '}
              <code>gpuws.step(i, loss=loss)</code> in the loop.
            </div>
          ) : (
            <ScalarCharts series={series ?? {}} theme={props.theme} log={props.log} />
          )}
        </section>
        <section aria-label="GPUs">
          <GpuCharts history={history} sample={props.sample} theme={props.theme} />
        </section>
      </div>
    </div>
  );
}

function RunSummary(props: { run: ITrainingRun }): JSX.Element {
  const { run } = props;
  const rate = run.rate ? `${run.rate.toPrecision(3)} steps/s` : null;
  const eta = etaText(run);
  const elapsed = run.elapsed !== null ? `${duration(run.elapsed)} trained` : null;
  return (
    <div className="jp-gpuws-dashboard-summary" data-testid="gpuws-dashboard-summary">
      <span>{[stepText(run), rate, elapsed, eta].filter(Boolean).join(' · ')}</span>
      {run.verdict?.message && (
        <span className={`jp-gpuws-verdict jp-gpuws-status-${runLevel(run)}`}>
          {' '}
          — {run.verdict.message}
        </span>
      )}
      {run.anomalies.map(a => (
        <div key={a.id} className={`jp-gpuws-message jp-gpuws-anomaly jp-gpuws-anomaly-${a.level}`}>
          {a.message} {a.advice}
        </div>
      ))}
    </div>
  );
}

function ScalarCharts(props: {
  series: { [name: string]: Array<[number, number, number | null]> };
  theme: number;
  log: boolean;
}): JSX.Element {
  const names = Object.keys(props.series).sort((a, b) =>
    a === 'loss' ? -1 : b === 'loss' ? 1 : a.localeCompare(b)
  );
  if (names.length === 0) {
    return (
      <div className="jp-gpuws-subtle">No scalar recorded yet: pass loss=… to gpuws.step.</div>
    );
  }
  return (
    <>
      {names.map((name, k) => (
        <ScalarChart
          key={name}
          name={name}
          points={props.series[name]}
          colour={COLOURS[k % COLOURS.length]}
          theme={props.theme}
          log={props.log && props.series[name].every(p => p[2] === null || p[2] > 0)}
        />
      ))}
    </>
  );
}

function ScalarChart(props: {
  name: string;
  points: Array<[number, number, number | null]>;
  colour: string;
  theme: number;
  log: boolean;
}): JSX.Element {
  const data = useMemo<uPlot.AlignedData>(
    () => [props.points.map(p => p[0]), props.points.map(p => p[2])],
    [props.points]
  );
  return (
    <Chart
      title={props.name}
      data={data}
      series={[{ label: props.name, colour: props.colour, format: scalarText }]}
      time={false}
      log={props.log}
      theme={props.theme}
      testId={`gpuws-chart-${props.name}`}
    />
  );
}

function GpuCharts(props: {
  history: ITrainingHistory | null;
  sample: ISample | null;
  theme: number;
}): JSX.Element {
  const gpus = props.history?.gpus ?? [];
  if (gpus.length === 0) {
    // The half says why it is empty, in the GPU section's words, where the charts would be.
    const sample = props.sample;
    return (
      <div className="jp-gpuws-dashboard-empty" data-testid="gpuws-dashboard-no-gpu">
        {!sample ? (
          'Waiting for the first sample…'
        ) : sample.gpus.length === 0 ? (
          <p>
            <NoGpu sample={sample} />
          </p>
        ) : (
          'The GPUs’ utilisation and memory appear here after their first few seconds.'
        )}
      </div>
    );
  }
  return (
    <>
      {gpus.map(gpu => (
        <GpuChart key={gpu.index} gpu={gpu} theme={props.theme} />
      ))}
    </>
  );
}

function GpuChart(props: { gpu: ITrainingHistory['gpus'][number]; theme: number }): JSX.Element {
  const { gpu } = props;
  const data = useMemo<uPlot.AlignedData>(
    () => [
      gpu.points.map(p => p[0]),
      gpu.points.map(p => p[1]),
      gpu.points.map(p => (p[2] === null ? null : p[2] * 100))
    ],
    [gpu.points]
  );
  const percent = (v: number) => `${Math.round(v)}%`;
  return (
    <Chart
      title={`GPU ${gpu.index} · ${gpu.name}`}
      data={data}
      series={[
        { label: 'utilisation', colour: '--jp-brand-color1', format: percent },
        { label: 'memory', colour: '--jp-warn-color1', format: percent }
      ]}
      time={true}
      yRange={[0, 100]}
      theme={props.theme}
      testId={`gpuws-chart-gpu-${gpu.index}`}
    />
  );
}
