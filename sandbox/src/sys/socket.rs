//! Unix sockets: pairs, descriptors passed with `SCM_RIGHTS`, and waiting
//! for input (the warm-start channels to zygotes and inits).

use super::check;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// socketpair(2) of unix sockets of `kind` (`SOCK_STREAM`, `SOCK_SEQPACKET`), close-on-exec.
pub(crate) fn socketpair(kind: libc::c_int) -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: socketpair writes two descriptors into `fds`.
    check(unsafe { libc::socketpair(libc::AF_UNIX, kind | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr()) })?;
    // SAFETY: fresh descriptors we own.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// sendmsg of `data` with `fds` attached (SCM_RIGHTS), all of it or an error.
pub(crate) fn send_with_fds(sock: BorrowedFd<'_>, data: &[u8], fds: &[RawFd]) -> std::io::Result<()> {
    match super::raw::send_fds(sock.as_raw_fd(), data, fds) {
        Ok(n) if n == data.len() => Ok(()),
        Ok(_) => Err(std::io::Error::other("short send to the zygote")),
        Err(errno) => Err(std::io::Error::from_raw_os_error(errno)),
    }
}

/// recvmsg of up to `data.len()` bytes and the descriptors attached
/// (SCM_RIGHTS, at most 16), without blocking (EAGAIN when there is nothing).
pub(crate) fn recv_with_fds(sock: BorrowedFd<'_>, data: &mut [u8]) -> std::io::Result<(usize, Vec<OwnedFd>)> {
    const MAX: usize = 16;
    // SAFETY: CMSG_SPACE is a pure computation.
    let space = unsafe { libc::CMSG_SPACE((MAX * std::mem::size_of::<RawFd>()) as u32) } as usize;
    let mut cbuf = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: msghdr is plain data; zeroed is valid.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = space;
    // SAFETY: msg points at live buffers for the call.
    let n = check(unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC | libc::MSG_DONTWAIT) })?;
    let mut fds = Vec::new();
    // SAFETY: the kernel filled the control buffer; the macros walk it within
    // msg_controllen, and each SCM_RIGHTS payload is an array of descriptors
    // now ours.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let payload = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                let p = libc::CMSG_DATA(c) as *const RawFd;
                for i in 0..payload / std::mem::size_of::<RawFd>() {
                    fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(p.add(i))));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(std::io::Error::other("descriptors were cut off"));
    }
    Ok((n as usize, fds))
}

/// recv(2) into `buf`, blocking; the bytes received.
pub(crate) fn recv(sock: BorrowedFd<'_>, buf: &mut [u8]) -> std::io::Result<usize> {
    // SAFETY: recv into our buffer, of its length.
    let n = check(unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr() as *mut libc::c_void, buf.len(), 0) })?;
    Ok(n as usize)
}

/// send(2) of all of `data` (blocking, no SIGPIPE), resuming after interruptions.
pub(crate) fn send_all(sock: BorrowedFd<'_>, mut data: &[u8]) -> std::io::Result<()> {
    while !data.is_empty() {
        // SAFETY: send from our buffer, of its length.
        let n = unsafe {
            libc::send(
                sock.as_raw_fd(),
                data.as_ptr() as *const libc::c_void,
                data.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        data = &data[n as usize..];
    }
    Ok(())
}

/// poll(2): waits up to `timeout` for `fd` to be readable.
pub(crate) fn wait_readable(fd: BorrowedFd<'_>, timeout: Duration) -> std::io::Result<bool> {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd, alive for the call.
    let r = check(unsafe { libc::poll(&mut p, 1, timeout.as_millis().min(i32::MAX as u128) as i32) })?;
    Ok(r > 0)
}
