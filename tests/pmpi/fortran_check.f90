! MPI_ALLTOALL, MPI_ALLTOALLV, MPI_ALLGATHER, MPI_ALLREDUCE (also with MPI_IN_PLACE),
! MPI_REDUCE_SCATTER_BLOCK, MPI_BCAST and MPI_BARRIER called from Fortran (mpif.h
! bindings), each result compared with the PMPI_ routine's on the same data, on
! MPI_COMM_WORLD and on a Cartesian sub-communicator. Prints "fortran_check: 0 failures" on
! rank 0 when all agree. (The values are integers below 2**53, so sums in any order agree.)
program fortran_check
  implicit none
  include 'mpif.h'
  integer :: ierr, rank, nprocs, failures, total, cart, sub, dims(2)
  logical :: periods(2), keep(2)

  call MPI_INIT(ierr)
  call MPI_COMM_RANK(MPI_COMM_WORLD, rank, ierr)
  call MPI_COMM_SIZE(MPI_COMM_WORLD, nprocs, ierr)
  failures = 0
  call check(MPI_COMM_WORLD)
  dims = 0
  periods = .false.
  call MPI_DIMS_CREATE(nprocs, 2, dims, ierr)
  call MPI_CART_CREATE(MPI_COMM_WORLD, 2, dims, periods, .false., cart, ierr)
  keep = (/ .true., .false. /)
  call MPI_CART_SUB(cart, keep, sub, ierr)
  call check(sub)
  call MPI_COMM_FREE(sub, ierr)
  call MPI_COMM_FREE(cart, ierr)
  call MPI_ALLREDUCE(failures, total, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (rank == 0) print '(a,i0,a)', 'fortran_check: ', total, ' failures'
  call MPI_FINALIZE(ierr)

contains

  subroutine check(comm)
    integer, intent(in) :: comm
    integer :: p, me, n, j, k, counts(3), sc(0:63), sd(0:63), rc(0:63), rd(0:63)
    double precision, allocatable :: send(:), got(:), want(:)
    counts = (/ 1, 100, 5000 /)
    call MPI_COMM_SIZE(comm, p, ierr)
    call MPI_COMM_RANK(comm, me, ierr)
    do k = 1, 3
      n = counts(k)
      allocate(send(n * p), got(n * p), want(n * p))
      do j = 1, n * p
        send(j) = me * 1.0d6 + j + k
      end do
      got = -1
      want = -1
      call MPI_ALLTOALL(send, n, MPI_DOUBLE_PRECISION, got, n, MPI_DOUBLE_PRECISION, comm, ierr)
      call PMPI_ALLTOALL(send, n, MPI_DOUBLE_PRECISION, want, n, MPI_DOUBLE_PRECISION, comm, ierr)
      if (any(got /= want)) failures = failures + 1
      ! Ragged: rank i sends mod(i + j, 3) * n / 2 to rank j.
      do j = 0, p - 1
        sc(j) = mod(me + j, 3) * n / 2
        rc(j) = mod(j + me, 3) * n / 2
      end do
      sd(0) = 0
      rd(0) = 0
      do j = 1, p - 1
        sd(j) = sd(j - 1) + sc(j - 1)
        rd(j) = rd(j - 1) + rc(j - 1)
      end do
      got = -1
      want = -1
      call MPI_ALLTOALLV(send, sc, sd, MPI_DOUBLE_PRECISION, got, rc, rd, MPI_DOUBLE_PRECISION, comm, ierr)
      call PMPI_ALLTOALLV(send, sc, sd, MPI_DOUBLE_PRECISION, want, rc, rd, MPI_DOUBLE_PRECISION, comm, ierr)
      if (any(got /= want)) failures = failures + 1
      call collectives(comm, p, n, send, got, want)
      deallocate(send, got, want)
    end do
  end subroutine check

  subroutine collectives(comm, p, n, send, got, want)
    integer, intent(in) :: comm, p, n
    double precision, intent(in) :: send(n * p)
    double precision, intent(inout) :: got(n * p), want(n * p)
    integer :: e(6)
    e = MPI_SUCCESS
    got = -1
    want = -1
    call MPI_ALLGATHER(send, n, MPI_DOUBLE_PRECISION, got, n, MPI_DOUBLE_PRECISION, comm, e(1))
    call PMPI_ALLGATHER(send, n, MPI_DOUBLE_PRECISION, want, n, MPI_DOUBLE_PRECISION, comm, ierr)
    if (any(got /= want)) failures = failures + 1
    call MPI_ALLREDUCE(send, got, n * p, MPI_DOUBLE_PRECISION, MPI_SUM, comm, e(2))
    call PMPI_ALLREDUCE(send, want, n * p, MPI_DOUBLE_PRECISION, MPI_SUM, comm, ierr)
    if (any(got /= want)) failures = failures + 1
    got = send
    call MPI_ALLREDUCE(MPI_IN_PLACE, got, n * p, MPI_DOUBLE_PRECISION, MPI_SUM, comm, e(3))
    if (any(got /= want)) failures = failures + 1
    got = -1
    want = -1
    call MPI_REDUCE_SCATTER_BLOCK(send, got, n, MPI_DOUBLE_PRECISION, MPI_MAX, comm, e(4))
    call PMPI_REDUCE_SCATTER_BLOCK(send, want, n, MPI_DOUBLE_PRECISION, MPI_MAX, comm, ierr)
    if (any(got(1:n) /= want(1:n))) failures = failures + 1
    got = send
    want = send
    call MPI_BCAST(got, n * p, MPI_DOUBLE_PRECISION, p - 1, comm, e(5))
    call PMPI_BCAST(want, n * p, MPI_DOUBLE_PRECISION, p - 1, comm, ierr)
    if (any(got /= want)) failures = failures + 1
    call MPI_BARRIER(comm, e(6))
    if (any(e /= MPI_SUCCESS)) failures = failures + 1
  end subroutine collectives
end program fortran_check
