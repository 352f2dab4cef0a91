import React from 'react';

import { IGpu, IGpuProcess, ISample } from '../api';
import { count, percent, shortPath, size, span, usage } from '../vocabulary';
import { serverReach } from '../reach';
import { BusyAndMemory } from './Bar';
import { Sparkline } from './Sparkline';

/** One card per GPU, or a plain statement of why there are none. */
export function GpuSection(props: {
  sample: ISample;
  history: ISample[];
  sparklineSeconds: number;
}): JSX.Element {
  const { sample } = props;
  const driver = sample.driver_version
    ? `Driver ${sample.driver_version}${sample.cuda_driver_version ? ` · CUDA ${sample.cuda_driver_version}` : ''}`
    : null;
  return (
    <>
      {driver && <div className="jp-gpuws-line jp-gpuws-subtle jp-gpuws-ellipsis">{driver}</div>}
      {sample.gpu_error && (
        <div
          className={sample.gpus.length ? 'jp-gpuws-message jp-gpuws-warning' : 'jp-gpuws-message'}
          data-testid="gpuws-no-gpu"
        >
          {sample.gpus.length === 0 ? (
            <>
              <NoGpu sample={sample} />
              {/* Not while the server does not answer: the figures are then its last. */}
              {serverReach.since === null &&
                ' The CPU, memory and disk figures below are still live.'}
            </>
          ) : (
            `${sample.gpu_error}.`
          )}
        </div>
      )}
      {sample.gpus.map(gpu => (
        <GpuCard
          key={gpu.uuid}
          gpu={gpu}
          history={props.history}
          seconds={props.sparklineSeconds}
          now={sample.time}
        />
      ))}
    </>
  );
}

/** Why there is no GPU, as NVML said it: "No GPU found. NVML cannot be loaded (…)." The panel's
 * GPU section and the dashboard's GPU half say the same. */
export function NoGpu(props: { sample: ISample }): JSX.Element {
  return (
    <>
      <strong>No GPU found.</strong> {props.sample.gpu_error ?? 'NVML reports no GPU'}.
    </>
  );
}

function GpuCard(props: {
  gpu: IGpu;
  history: ISample[];
  seconds: number;
  now: number;
}): JSX.Element {
  const { gpu } = props;
  const util: Array<[number, number]> = [];
  const mem: Array<[number, number]> = [];
  for (const sample of props.history) {
    const g = sample.gpus.find(item => item.uuid === gpu.uuid);
    if (g) {
      if (g.utilization !== null) {
        util.push([sample.time, g.utilization]);
      }
      const m = percent(g.memory_used, g.memory_total);
      if (m !== null) {
        mem.push([sample.time, m]);
      }
    }
  }
  // Until the window has filled, span what there is rather than a mostly empty chart.
  const oldest = props.history.length ? props.history[0].time : props.now;
  const reach = Math.max(Math.min(props.seconds, props.now - oldest), 1);
  const details = [
    gpu.temperature !== null ? `${gpu.temperature} °C` : null,
    gpu.power_draw !== null
      ? `${Math.round(gpu.power_draw)}${gpu.power_limit ? ` / ${Math.round(gpu.power_limit)}` : ''} W`
      : null,
    gpu.sm_clock !== null ? `${gpu.sm_clock} MHz` : null
  ].filter(Boolean);
  const processes = [...gpu.processes, ...gpu.mig.flatMap(m => m.processes)];
  return (
    <div className="jp-gpuws-card" data-testid="gpuws-gpu-card">
      <div className="jp-gpuws-card-title" title={`${gpu.name}\n${gpu.uuid}`}>
        <span className="jp-gpuws-gpu-index">GPU {gpu.index}</span>{' '}
        <span className="jp-gpuws-gpu-name">{gpu.name.replace(/^NVIDIA /, '')}</span>
      </div>
      <BusyAndMemory
        label="Utilisation"
        busy={gpu.utilization}
        used={gpu.memory_used}
        total={gpu.memory_total}
        testIds={['gpuws-gpu-util', 'gpuws-gpu-memory']}
      />
      {details.length > 0 && <div className="jp-gpuws-details">{details.join(' · ')}</div>}
      <Sparkline
        title={`GPU ${gpu.index} utilisation and memory, last ${span(reach)}`}
        seconds={reach}
        now={props.now}
        series={[
          { name: 'util', className: 'jp-gpuws-line-util', points: util },
          { name: 'mem', className: 'jp-gpuws-line-mem', points: mem }
        ]}
      />
      <div className="jp-gpuws-legend">
        <span className="jp-gpuws-key-util">utilisation</span>
        <span className="jp-gpuws-key-mem">memory</span>
        <span className="jp-gpuws-subtle">last {span(reach)}</span>
      </div>
      {gpu.mig.length > 0 && (
        <ul className="jp-gpuws-mig">
          {gpu.mig.map(m => (
            <li key={m.uuid} title={m.uuid}>
              MIG {m.index}: {usage(m.memory_used, m.memory_total)}
            </li>
          ))}
        </ul>
      )}
      <ProcessList processes={processes} />
    </div>
  );
}

/** How a kernel's own report was measured, in the user's words. */
function figureName(source: string): string | null {
  switch (source) {
    case 'kernel:nvml':
      return 'as NVML sees the kernel';
    case 'kernel:torch_reserved':
      return 'reserved by PyTorch';
    case 'kernel:torch_allocated':
      return 'allocated by PyTorch';
    default:
      return source.startsWith('kernel:') ? source.slice(7) : null;
  }
}

function ProcessList(props: { processes: IGpuProcess[] }): JSX.Element {
  // NVML reports the host's PIDs: inside a container they are no process here. Say so once,
  // rather than list numbers that mean nothing (or claim nothing holds memory).
  const shown = props.processes.filter(p => p.visible !== false);
  const hidden = props.processes.filter(p => p.visible === false);
  if (shown.length === 0 && hidden.length === 0) {
    return <div className="jp-gpuws-subtle">No process holds memory on this GPU.</div>;
  }
  const hiddenBytes = hidden.reduce((sum, p) => sum + (p.memory_used ?? 0), 0);
  return (
    <>
      {shown.length > 0 && (
        <ul className="jp-gpuws-processes" aria-label="Processes using this GPU">
          {shown.map(p => {
            const figure = figureName(p.memory_source ?? 'nvml');
            return (
              <li key={`${p.kernel_id ?? ''}:${p.pid ?? ''}`} data-testid="gpuws-gpu-process">
                <span
                  className="jp-gpuws-process-name"
                  title={p.notebook ?? (p.kernel_id ? `kernel ${p.kernel_id}` : `PID ${p.pid}`)}
                >
                  {p.notebook
                    ? shortPath(p.notebook)
                    : p.kernel_id
                      ? `kernel ${p.kernel_id.slice(0, 8)}`
                      : `PID ${p.pid} (not a kernel)`}
                </span>
                <span
                  className="jp-gpuws-process-mem"
                  title={figure ? `The kernel's own report: ${figure}` : undefined}
                >
                  {size(p.memory_used)}
                  {figure && <span className="jp-gpuws-subtle"> ({figure})</span>}
                </span>
              </li>
            );
          })}
        </ul>
      )}
      {hidden.length > 0 && (
        <div
          className="jp-gpuws-subtle"
          data-testid="gpuws-gpu-hidden-processes"
          title={`PIDs as the host numbers them: ${hidden.map(p => p.pid).join(', ')}`}
        >
          {count(hidden.length, 'process')} not visible from this container
          {hiddenBytes > 0 ? ` (${size(hiddenBytes)})` : ''}
          {shown.some(p => (p.memory_source ?? '').startsWith('kernel:'))
            ? ', the kernels above among them.'
            : '.'}
        </div>
      )}
    </>
  );
}
