/**
 * Jest: unit tests of the frontend's text and model functions (src/**\/__tests__), in Node
 * without a browser; TypeScript through ts-jest, with tsconfig.test.json.
 */
module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/src'],
  testMatch: ['**/__tests__/**/*.spec.ts'],
  transform: {
    '^.+\\.tsx?$': ['ts-jest', { tsconfig: 'tsconfig.test.json' }]
  }
};
