import React from 'react';

import { ISystem } from '../api';
import { percent, size, usage } from '../vocabulary';
import { Bar, BusyAndMemory } from './Bar';

const DISK_LABELS: { [label: string]: string } = {
  workdir: 'Disk (work dir)',
  store: 'Disk (store)'
};

/** CPU, memory and disks, bounded by the container's limits where it has them. */
export function SystemSection(props: { system: ISystem }): JSX.Element {
  const { system } = props;
  const cores = Number.isInteger(system.cpu_count) ? system.cpu_count : system.cpu_count.toFixed(1);
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
      <BusyAndMemory
        label={`CPU (${cores} cores)`}
        busy={system.cpu_percent}
        used={system.memory_used}
        total={system.memory_total}
        testIds={['gpuws-cpu', 'gpuws-memory']}
      />
      {system.disks.map(disk => (
        <div key={disk.label} title={`${disk.path}: ${size(disk.total - disk.used)} free`}>
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
