# nbdev's setup.py, driven entirely by settings.ini.
from configparser import ConfigParser
import setuptools, shlex, json
from pathlib import Path
from setuptools.command.build_py import build_py


class build_py_with_analyses(build_py):
    """Also put the analysis notebooks (nbs/analyses/<paper>/NN_name.ipynb) into the package as vlbias_nb/analyses/, so an
    installed wheel runs `vlbias list` / `vlbias reproduce` from any folder."""
    def run(self):
        super().run()
        src = Path(__file__).resolve().parent / "nbs" / "analyses"
        dest = Path(self.build_lib) / "vlbias_nb" / "analyses"
        for nb in sorted(src.rglob("[0-9]*_*.ipynb")):
            if ".ipynb_checkpoints" in nb.parts: continue
            out = dest / nb.relative_to(src)
            out.parent.mkdir(parents=True, exist_ok=True)
            d = json.loads(nb.read_text(encoding="utf-8"))     # the code and prose; a run writes its own outputs
            for c in d["cells"]:
                if c["cell_type"] == "code": c["outputs"], c["execution_count"] = [], None
            out.write_text(json.dumps(d, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")

config = ConfigParser(delimiters=['='])
config.read('settings.ini', encoding='utf-8')
cfg = config['DEFAULT']

cfg_keys = 'version description keywords author author_email'.split()
expected = cfg_keys + "lib_name user branch license status min_python audience language".split()
for o in expected: assert o in cfg, "missing expected setting: {}".format(o)
setup_cfg = {o: cfg[o] for o in cfg_keys}

licenses = {
    'apache2': ('Apache Software License 2.0', 'OSI Approved :: Apache Software License'),
    'mit': ('MIT License', 'OSI Approved :: MIT License'),
}
statuses = ['1 - Planning', '2 - Pre-Alpha', '3 - Alpha', '4 - Beta', '5 - Production/Stable', '6 - Mature', '7 - Inactive']
py_versions = '3.10 3.11 3.12 3.13'.split()

requirements = shlex.split(cfg.get('requirements', ''))
dev_requirements = shlex.split(cfg.get('dev_requirements', ''))
optional = {k: shlex.split(cfg.get(f'{k}_requirements', '')) for k in ('lic', 'gab', 'gensynth')}  # see settings.ini
full_requirements = sorted({r for reqs in optional.values() for r in reqs})
min_python = cfg['min_python']
lic = licenses.get(cfg['license'].lower(), (cfg['license'], None))

setuptools.setup(
    name=cfg['repo'],
    license=lic[0],
    classifiers=['Development Status :: ' + statuses[int(cfg['status'])],
                 'Intended Audience :: ' + cfg['audience'].title(),
                 'Natural Language :: ' + cfg['language'].title()]
                + ['Programming Language :: Python :: ' + o for o in py_versions[py_versions.index(min_python):]]
                + (['License :: ' + lic[1]] if lic[1] else []),
    url=cfg['git_url'],
    packages=setuptools.find_packages(include=['vlbias_nb', 'vlbias_nb.*']),
    include_package_data=True,
    package_data={'vlbias_nb': ['resources/*', 'resources/**/*']},
    install_requires=requirements,
    # dev/test: what the smoke profile and the tests use (LPIPS is full-profile only: its weights are not here)
    extras_require={**optional, 'full': full_requirements, 'dev': dev_requirements + full_requirements,
                    'test': dev_requirements + full_requirements,
                    'bench': shlex.split(cfg.get('bench_requirements', ''))},   # benchmarks only: not in full, dev or test
    dependency_links=cfg.get('dep_links', '').split(),
    python_requires='>=' + cfg['min_python'],
    long_description=open('README.md', encoding='utf-8').read(),
    long_description_content_type='text/markdown',
    zip_safe=False,
    cmdclass={'build_py': build_py_with_analyses},
    entry_points={
        'console_scripts': cfg.get('console_scripts', '').split(),
        'nbdev': [f'{cfg.get("lib_path")}={cfg.get("lib_path")}._modidx:d'],
    },
    **setup_cfg)
