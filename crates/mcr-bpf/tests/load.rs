//! MCR's object against this kernel: every map is created, every program
//! relocated and accepted by the verifier, and an attachment lasts exactly
//! as long as its link.

use mcr_sys::bpf::{Object, ProgramKind};

#[test]
fn mcrs_object_loads_and_every_program_is_verified() {
    let obj = match Object::load(mcr_bpf::OBJECT, &[("counters", 1024)]) {
        Ok(o) => o,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(
        obj.program(mcr_bpf::INGRESS).expect("ingress").kind(),
        ProgramKind::Classifier
    );
    assert_eq!(
        obj.program(mcr_bpf::RING_FILTER).expect("filter").kind(),
        ProgramKind::SocketFilter
    );
    assert_eq!(obj.map("counters").expect("counters").def().max_entries, 1024);
    assert!(obj.program("no_such_program").is_err());
}

#[test]
fn a_link_attaches_while_it_lives() {
    let mut tb = mcr_testbed::Testbed::new("bpf-link").expect("test bed");
    let ns = tb.ns("a").expect("namespace");
    ns.ip(&["link", "add", "d0", "type", "veth", "peer", "name", "d1"])
        .expect("veth");
    let name = ns.name().to_string();
    let counts = std::thread::spawn(move || {
        mcr_sys::netns::enter(&name).expect("enter the namespace");
        let ifindex = mcr_sys::iface::index("d0").expect("d0");
        let obj = Object::load(mcr_bpf::OBJECT, &[("counters", 1024)]).expect("loads");
        let count = || mcr_sys::bpf::tcx_ingress_programs(ifindex).expect("query");
        let before = count();
        let link = obj
            .program(mcr_bpf::INGRESS)
            .expect("ingress")
            .attach_tcx_ingress(ifindex)
            .expect("attached");
        assert_eq!(link.ifindex(), ifindex);
        let during = count();
        drop(link);
        (before, during, count())
    })
    .join()
    .expect("the namespace thread");
    assert_eq!(
        counts,
        (0, 1, 0),
        "attached while the link lives, detached when it is dropped"
    );
}
