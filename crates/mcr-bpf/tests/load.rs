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
fn counters_handed_over_are_the_same_cells() {
    use std::os::fd::AsFd;
    let obj = Object::load(mcr_bpf::OBJECT, &[("counters", 1024)]).expect("loads");
    let map = obj.map("counters").expect("counters");
    let mine = mcr_sys::bpf::MappedCounters::new(map).expect("maps");
    mine.set(1023, 42);
    let fd = mine.as_fd().try_clone_to_owned().expect("dup");
    let theirs = mcr_sys::bpf::MappedCounters::open(fd).expect("opens by descriptor");
    assert_eq!(theirs.len(), 1024);
    assert_eq!(theirs.get(1023), 42);
    theirs.set(7, 5);
    assert_eq!(mine.get(7), 5);
    // Any other map is refused, with what it is.
    let rules = obj
        .map("rules")
        .expect("rules")
        .as_fd()
        .try_clone_to_owned()
        .expect("dup");
    let e = mcr_sys::bpf::MappedCounters::open(rules).expect_err("not counters");
    assert!(e.to_string().contains("not a mmapable array of u64"), "{e}");
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

/// What a restart of mcrd does to an attachment: a copy of the link's
/// descriptor keeps the program attached when the link that made it is
/// gone (as systemd's store or the next mcrd holds it); the copy is taken
/// over as a tcx ingress link of the same interface; and it is switched to
/// another program, from an object with another map layout (an upgrade),
/// in one step: the same link, one program attached throughout, the new
/// one after. Something that is not a link is refused.
#[test]
fn a_link_handed_over_stays_attached_and_switches_to_another_program() {
    use std::os::fd::AsFd;
    let mut tb = mcr_testbed::Testbed::new("bpf-handover").expect("test bed");
    let ns = tb.ns("a").expect("namespace");
    ns.ip(&["link", "add", "d0", "type", "veth", "peer", "name", "d1"])
        .expect("veth");
    let name = ns.name().to_string();
    std::thread::spawn(move || {
        mcr_sys::netns::enter(&name).expect("enter the namespace");
        let ifindex = mcr_sys::iface::index("d0").expect("d0");
        let before = Object::load(mcr_bpf::OBJECT, &[("counters", 1024)]).expect("loads");
        let after = Object::load(mcr_bpf::OBJECT, &[("counters", 4096), ("outputs", 1024)]).expect("loads");
        let attached = || mcr_sys::bpf::tcx_ingress(ifindex).expect("query");
        let link = before
            .program(mcr_bpf::INGRESS)
            .expect("ingress")
            .attach_tcx_ingress(ifindex)
            .expect("attached");
        let first = link.ids().expect("ids");
        assert_eq!(attached(), [first]);
        let copy = link.as_fd().try_clone_to_owned().expect("a copy");
        drop(link);
        drop(before);
        assert_eq!(attached(), [first], "the copy keeps it attached");
        let taken = mcr_sys::bpf::Link::adopt(copy).expect("taken over");
        assert_eq!((taken.ifindex(), taken.id()), (ifindex, first.link));
        taken
            .update(after.program(mcr_bpf::INGRESS).expect("ingress"))
            .expect("switched");
        let now = taken.ids().expect("ids");
        assert_eq!(now.link, first.link, "the same link");
        assert_ne!(now.program, first.program, "the other program");
        assert_eq!(attached(), [now], "one program attached, the new one");
        drop(taken);
        assert!(attached().is_empty(), "detached with the last descriptor");
        let map = after
            .map("counters")
            .expect("counters")
            .as_fd()
            .try_clone_to_owned()
            .expect("map");
        let refused = mcr_sys::bpf::Link::adopt(map).expect_err("a map is no link");
        assert!(refused.to_string().contains("not a tc ingress link"), "{refused}");
    })
    .join()
    .expect("the namespace thread");
}
