// The status-bar item's colour and tooltip: coloured only while a part needs the user, the
// tooltip saying why first.
import { attention, IStatusPart } from '../attention';

const gpu: IStatusPart = {
  name: 'GPU',
  text: 'GPU 47 %',
  title: 'GPU 0 A100: 47 %',
  level: 'none'
};
const synced: IStatusPart = {
  name: 'Sync',
  text: 'synced 2 min ago',
  title: 'All saved',
  level: 'ok'
};

it('stays calm while nothing needs the user, each part in full in the tooltip', () => {
  expect(attention([gpu, synced])).toEqual({
    level: 'calm',
    title: 'GPU: GPU 0 A100: 47 %\nSync: All saved'
  });
});

it('turns orange for a warning and says why first', () => {
  const local = {
    ...synced,
    text: 'local store only',
    title: 'The store is on this disk',
    level: 'warning' as const
  };
  expect(attention([gpu, local])).toEqual({
    level: 'warning',
    title: 'Orange because:\n• Sync: The store is on this disk\n\nGPU: GPU 0 A100: 47 %'
  });
});

it('turns red when any part is an error, naming every reason', () => {
  const left = { name: 'Runtime', text: '1 min left', title: '', level: 'error' as const };
  const down = { ...synced, text: 'store down', title: 'refused', level: 'warning' as const };
  const { level, title } = attention([gpu, down, left]);
  expect(level).toBe('error');
  expect(title.split('\n').slice(0, 3)).toEqual([
    'Red because:',
    '• Sync: refused',
    '• Runtime: 1 min left'
  ]);
});
