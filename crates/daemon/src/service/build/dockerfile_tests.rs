use super::*;

fn no_args() -> BTreeMap<String, String> {
    BTreeMap::new()
}

fn plan_ok(text: &str) -> Plan {
    plan(text, &no_args()).unwrap()
}

fn plan_err(text: &str) -> ParseError {
    plan(text, &no_args()).unwrap_err()
}

#[test]
fn a_full_dockerfile_plans_every_step() {
    let p = plan_ok(
        "# tools\n\
         FROM default AS base\n\
         ARG VERSION=1.0\n\
         ENV APP=/srv/app \\\n    MODE=\"fast mode\"\n\
         WORKDIR $APP\n\
         COPY --chown=user:user requirements.txt ./\n\
         RUN pip install x==${VERSION}\n\
         RUN [\"echo\", \"$APP\"]\n\
         USER user\n\
         LABEL team=tools \"with space\"=yes\n\
         EXPOSE 8000 53/udp\n\
         CMD python3 -m http.server\n\
         ENTRYPOINT [\"tini\", \"--\"]\n",
    );
    assert_eq!(p.from, "default");
    assert_eq!(p.steps.len(), 12);
    assert_eq!(p.steps[0].instruction, "FROM default");
    assert_eq!(p.steps[2].line, 4);
    assert_eq!(p.steps[2].instruction, "ENV APP=/srv/app MODE=fast mode");
    assert_eq!(p.steps[3].action, Action::Mkdir("/srv/app".into()));
    assert_eq!(
        p.steps[4].action,
        Action::Copy(CopySpec {
            sources: vec!["requirements.txt".into()],
            dest: "/srv/app/".into(),
            chown: Some("user:user".into()),
            add: false,
        })
    );
    let Action::Run {
        argv,
        env,
        cwd,
        user,
    } = &p.steps[5].action
    else {
        panic!("not a run: {:?}", p.steps[5]);
    };
    // RUN is not substituted by the parser: the shell does it with the env.
    assert_eq!(argv, &["/bin/sh", "-c", "pip install x==${VERSION}"]);
    assert_eq!(env["VERSION"], "1.0");
    assert_eq!(env["MODE"], "fast mode");
    assert_eq!(cwd, "/srv/app");
    assert_eq!(user, &None);
    let Action::Run { argv, .. } = &p.steps[6].action else {
        panic!()
    };
    assert_eq!(argv, &["echo", "$APP"]);
    assert_eq!(p.config.user.as_deref(), Some("user"));
    assert_eq!(p.config.workdir.as_deref(), Some("/srv/app"));
    assert_eq!(p.config.env, vec!["APP=/srv/app", "MODE=fast mode"]);
    assert_eq!(p.config.labels["with space"], "yes");
    assert_eq!(p.config.exposed_ports, vec!["8000", "53/udp"]);
    assert_eq!(
        p.config.cmd,
        Some(vec![
            "/bin/sh".into(),
            "-c".into(),
            "python3 -m http.server".into()
        ])
    );
    assert_eq!(p.config.entrypoint, Some(vec!["tini".into(), "--".into()]));
}

#[test]
fn runs_after_user_and_shell_use_them() {
    let p = plan_ok("FROM default\nUSER nobody\nSHELL [\"/bin/bash\", \"-ec\"]\nRUN id\n");
    let Action::Run { argv, user, .. } = &p.steps[3].action else {
        panic!()
    };
    assert_eq!(argv, &["/bin/bash", "-ec", "id"]);
    assert_eq!(user.as_deref(), Some("nobody"));
}

#[test]
fn build_args_override_defaults_and_must_be_declared() {
    let mut a = BTreeMap::new();
    a.insert("V".to_string(), "2".to_string());
    let p = plan("FROM default\nARG V=1\nENV X=$V\n", &a).unwrap();
    assert_eq!(p.config.env, vec!["X=2"]);
    a.insert("NOPE".into(), "x".into());
    let e = plan("FROM default\nARG V=1\n", &a).unwrap_err();
    assert!(e.message.contains("NOPE"), "{e}");
}

#[test]
fn args_before_from_reach_from_only() {
    let p = plan_ok("ARG BASE=py:1\nFROM ${BASE}\nENV B=${BASE}\n");
    assert_eq!(p.from, "py:1");
    assert_eq!(p.config.env, vec!["B="]);
}

#[test]
fn legacy_env_takes_the_rest_of_the_line() {
    let p = plan_ok("FROM default\nENV GREETING hello world\n");
    assert_eq!(p.config.env, vec!["GREETING=hello world"]);
}

#[test]
fn substitution_forms() {
    let mut v = BTreeMap::new();
    v.insert("A".to_string(), "x".to_string());
    v.insert("E".to_string(), String::new());
    let s = |t: &str| substitute(1, t, &v).unwrap();
    assert_eq!(s("$A/${A}"), "x/x");
    assert_eq!(s("${E:-def}|${A:-def}|${MISSING}"), "def|x|");
    assert_eq!(s("${A:+alt}|${E:+alt}"), "alt|");
    assert_eq!(s("\\$A costs $5"), "$A costs $5");
    assert!(substitute(3, "${A", &v)
        .unwrap_err()
        .message
        .contains("unterminated"));
}

#[test]
fn continuations_keep_the_first_line_number_and_skip_comments() {
    let p = plan_ok("FROM default\n\nRUN echo a \\\n# inside\n  && echo b\nRUN false\n");
    assert_eq!(p.steps[1].line, 3);
    assert_eq!(p.steps[1].instruction, "RUN echo a && echo b");
    assert_eq!(p.steps[2].line, 6);
}

#[test]
fn copy_destinations_and_add() {
    let p = plan_ok(
        "FROM default\nWORKDIR /w\nCOPY a b dir\nCOPY f renamed\nADD [\"x.tar\", \"/opt/\"]\n",
    );
    let Action::Copy(c) = &p.steps[2].action else {
        panic!()
    };
    assert_eq!(c.dest, "/w/dir/");
    let Action::Copy(c) = &p.steps[3].action else {
        panic!()
    };
    assert_eq!(c.dest, "/w/renamed");
    let Action::Copy(c) = &p.steps[4].action else {
        panic!()
    };
    assert!(c.add);
    assert_eq!(c.sources, vec!["x.tar"]);
    assert_eq!(c.dest, "/opt/");
}

#[test]
fn errors_name_their_line() {
    let cases = [
        ("RUN echo\n", 1, "before FROM"),
        ("", 1, "no FROM"),
        ("FROM default\nFROM default\n", 2, "multi-stage"),
        ("FROM default\n\nCOPY --from=base /a /b\n", 3, "--from"),
        ("FROM default\nADD https://x.org/f /f\n", 2, "URLs"),
        ("FROM default\nCOPY ../etc /x\n", 2, "inside the context"),
        (
            "FROM default\nCOPY onlyone\n",
            2,
            "source and a destination",
        ),
        ("FROM default\nVOLUME /data\n", 2, "VOLUME is not supported"),
        (
            "FROM default\nFROBNICATE x\n",
            2,
            "unknown instruction FROBNICATE",
        ),
        ("FROM default\nENV\n", 2, "needs arguments"),
        ("FROM default\nLABEL novalue\n", 2, "not KEY=value"),
        ("FROM default\nSHELL /bin/bash\n", 2, "JSON array"),
        ("FROM default\nEXPOSE http\n", 2, "not a port"),
        ("FROM default\nUSER\n", 2, "USER takes"),
        ("FROM default\nRUN\n", 2, "needs a command"),
        (
            "FROM default\nRUN --mount=type=cache x\n",
            2,
            "not supported",
        ),
        ("FROM default\nARG 1x\n", 2, "not a variable name"),
        ("FROM default\nENV A=\"open\n", 2, "unterminated quote"),
        ("FROM scratch\n", 1, "scratch"),
        ("FROM a b\n", 1, "FROM takes"),
        ("FROM default\n= x\n", 2, "not an instruction"),
    ];
    for (text, line, msg) in cases {
        let e = plan_err(text);
        assert_eq!(e.line, line, "{text:?}: {e}");
        assert!(e.message.contains(msg), "{text:?}: {e}");
        assert!(e.to_string().starts_with(&format!("line {line}: ")));
    }
}
