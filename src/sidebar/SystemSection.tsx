import React from 'react';

import { ISystem } from '../api';
import { formatBytes, formatPercent, percent } from '../format';
import { Bar } from './Bar';
import { usage } from '../vocabulary';

const DISK_LABELS: { [label: string]: string } = {
  workdir: 'Disk (work dir)',
  store: 'Disk (store)'
};

/** CPU, memory and disks, bounded by the container's limits where it has them. */
export function SystemSection(props: { system: ISystem }): JSX.Element {
  const { system } = props;
  const cores = Number.isInteger(system.cpu_count) ? system.cpu_count : system.cpu_count.toFixed(1);
  const memory = percent(system.memory_used, system.memory_total);
  return (
    <>
      {system.limits === 'cgroup' && (
        <div
          className="jp-gpuws-line jp-gpuws-subtle"
          title="Figures are bounded by the container's cgroup limits"
        >
          Within the container's limits
        </div>
      )}
      <Bar
        label={`CPU (${cores} cores)`}
        value={system.cpu_percent}
        text={formatPercent(system.cpu_percent)}
        testId="gpuws-cpu"
      />
      <Bar
        label="Memory"
        value={memory}
        text={usage(system.memory_used, system.memory_total)}
        capacity
        testId="gpuws-memory"
      />
      {system.disks.map(disk => (
        <div key={disk.label} title={`${disk.path}: ${formatBytes(disk.total - disk.used)} free`}>
          <Bar
            label={DISK_LABELS[disk.label] ?? disk.label}
            value={percent(disk.used, disk.total)}
            text={usage(disk.used, disk.total)}
            capacity
            testId={`gpuws-disk-${disk.label}`}
          />
        </div>
      ))}
    </>
  );
}
