// ESLint 9 (flat configuration) with the JupyterLab extension template's rules, over src/ and
// ui-tests/ (and these configuration files); prettier owns the formatting (jlpm prettier:check).
import js from '@eslint/js';
import prettier from 'eslint-config-prettier';
import globals from 'globals';
import tseslint from 'typescript-eslint';

export default [
  {
    ignores: [
      '**/node_modules/',
      'lib/',
      'coverage/',
      'jupyter_gpu_ws/labextension/',
      'ui-tests/test-results/',
      'ui-tests/playwright-report/',
      '**/*.d.ts',
      '.venv/',
      'bench/',
      'deploy/',
      'docs/',
      'tests/',
      // Generated from docs/openapi.yaml by jlpm run api:generate (its names are the generator's)
      'src/api.generated.ts'
    ]
  },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  prettier,
  {
    files: ['**/*.{ts,tsx}'],
    languageOptions: { globals: globals.browser },
    rules: {
      '@typescript-eslint/naming-convention': [
        'error',
        {
          selector: 'interface',
          format: ['PascalCase'],
          custom: { regex: '^I[A-Z]', match: true }
        }
      ],
      '@typescript-eslint/no-unused-vars': ['error', { args: 'none' }],
      // JupyterLab's own idiom for a plugin's command ids (index.ts), as in the template.
      '@typescript-eslint/no-namespace': 'off',
      curly: ['error', 'all'],
      eqeqeq: 'error',
      'prefer-arrow-callback': 'error',
      // After eslint-config-prettier, which turns it off: prettier keeps single quotes too, but
      // would not complain about a needless escape or a template literal without a substitution.
      quotes: ['error', 'single', { avoidEscape: true, allowTemplateLiterals: false }]
    }
  },
  {
    files: ['scripts/**/*.mjs', '*.config.{js,mjs}'],
    languageOptions: { globals: globals.node }
  },
  {
    files: ['**/__tests__/**/*.ts'],
    languageOptions: { globals: globals.jest }
  },
  {
    files: ['*.js', 'ui-tests/*.js'],
    languageOptions: { globals: globals.node, sourceType: 'commonjs' },
    rules: {
      // CommonJS configuration files (jest.config.js, playwright.config.js) load with require.
      '@typescript-eslint/no-require-imports': 'off'
    }
  }
];
