// A stand-in for the server in the models' tests: the mocked requestAPI answers each end point
// from a table the test sets (an Error is thrown, as a failed request would be), and records
// what was asked.
import { requestAPI } from '../api';

export type Answer = unknown | ((init?: RequestInit) => unknown);

/** Asked so far: each end point with its method. */
export const asked: string[] = [];

/** Make the mocked requestAPI answer from `answers`; an end point not there never answers. */
export function answer(answers: { [endPoint: string]: Answer }): void {
  asked.length = 0;
  (requestAPI as jest.Mock).mockImplementation((endPoint: string, init?: RequestInit) => {
    asked.push(`${init?.method ?? 'GET'} ${endPoint}`);
    if (!(endPoint in answers)) {
      return new Promise(() => undefined);
    }
    const value = answers[endPoint];
    const result = typeof value === 'function' ? value(init) : value;
    return result instanceof Error ? Promise.reject(result) : Promise.resolve(result);
  });
}

/** Let pending promise callbacks run. */
export async function settle(): Promise<void> {
  for (let k = 0; k < 5; k++) {
    await Promise.resolve();
  }
}
