! The mpi_f08 twin of fortran_check.f90: MPI_Alltoall, MPI_Alltoallv, MPI_Allgather,
! MPI_Allreduce (also with MPI_IN_PLACE), MPI_Reduce_scatter_block, MPI_Bcast and
! MPI_Barrier called through `use mpi_f08` (handles are derived types, choice buffers
! assumed-type), each result compared with the PMPI_ routine's on the same data, on
! MPI_COMM_WORLD and on a Cartesian sub-communicator. Prints "f08_check: 0 failures" on
! rank 0 when all agree. (The values are integers below 2**53, so sums in any order agree.)
program f08_check
  use mpi_f08
  implicit none
  integer :: rank, nprocs, failures, total, dims(2)
  logical :: periods(2), keep(2)
  type(MPI_Comm) :: cart, sub

  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, nprocs)
  failures = 0
  call check(MPI_COMM_WORLD)
  dims = 0
  periods = .false.
  call MPI_Dims_create(nprocs, 2, dims)
  call MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, .false., cart)
  keep = (/ .true., .false. /)
  call MPI_Cart_sub(cart, keep, sub)
  call check(sub)
  call MPI_Comm_free(sub)
  call MPI_Comm_free(cart)
  call MPI_Allreduce(failures, total, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD)
  if (rank == 0) print '(a,i0,a)', 'f08_check: ', total, ' failures'
  call MPI_Finalize()

contains

  subroutine check(comm)
    type(MPI_Comm), intent(in) :: comm
    integer :: p, me, n, j, k, counts(3), sc(0:63), sd(0:63), rc(0:63), rd(0:63)
    double precision, allocatable :: send(:), got(:), want(:)
    counts = (/ 1, 100, 5000 /)
    call MPI_Comm_size(comm, p)
    call MPI_Comm_rank(comm, me)
    do k = 1, 3
      n = counts(k)
      allocate(send(n * p), got(n * p), want(n * p))
      do j = 1, n * p
        send(j) = me * 1.0d6 + j + k
      end do
      got = -1
      want = -1
      call MPI_Alltoall(send, n, MPI_DOUBLE_PRECISION, got, n, MPI_DOUBLE_PRECISION, comm)
      call PMPI_Alltoall(send, n, MPI_DOUBLE_PRECISION, want, n, MPI_DOUBLE_PRECISION, comm)
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
      call MPI_Alltoallv(send, sc(0:p-1), sd(0:p-1), MPI_DOUBLE_PRECISION, got, rc(0:p-1), rd(0:p-1), &
                         MPI_DOUBLE_PRECISION, comm)
      call PMPI_Alltoallv(send, sc(0:p-1), sd(0:p-1), MPI_DOUBLE_PRECISION, want, rc(0:p-1), rd(0:p-1), &
                          MPI_DOUBLE_PRECISION, comm)
      if (any(got /= want)) failures = failures + 1
      call collectives(comm, p, n, send, got, want)
      deallocate(send, got, want)
    end do
  end subroutine check

  subroutine collectives(comm, p, n, send, got, want)
    type(MPI_Comm), intent(in) :: comm
    integer, intent(in) :: p, n
    double precision, intent(in) :: send(n * p)
    double precision, intent(inout) :: got(n * p), want(n * p)
    integer :: e(6)
    e = MPI_SUCCESS
    got = -1
    want = -1
    call MPI_Allgather(send, n, MPI_DOUBLE_PRECISION, got, n, MPI_DOUBLE_PRECISION, comm, e(1))
    call PMPI_Allgather(send, n, MPI_DOUBLE_PRECISION, want, n, MPI_DOUBLE_PRECISION, comm)
    if (any(got /= want)) failures = failures + 1
    call MPI_Allreduce(send, got, n * p, MPI_DOUBLE_PRECISION, MPI_SUM, comm, e(2))
    call PMPI_Allreduce(send, want, n * p, MPI_DOUBLE_PRECISION, MPI_SUM, comm)
    if (any(got /= want)) failures = failures + 1
    got = send
    call MPI_Allreduce(MPI_IN_PLACE, got, n * p, MPI_DOUBLE_PRECISION, MPI_SUM, comm, e(3))
    if (any(got /= want)) failures = failures + 1
    got = -1
    want = -1
    call MPI_Reduce_scatter_block(send, got, n, MPI_DOUBLE_PRECISION, MPI_MAX, comm, e(4))
    call PMPI_Reduce_scatter_block(send, want, n, MPI_DOUBLE_PRECISION, MPI_MAX, comm)
    if (any(got(1:n) /= want(1:n))) failures = failures + 1
    got = send
    want = send
    call MPI_Bcast(got, n * p, MPI_DOUBLE_PRECISION, p - 1, comm, e(5))
    call PMPI_Bcast(want, n * p, MPI_DOUBLE_PRECISION, p - 1, comm)
    if (any(got /= want)) failures = failures + 1
    call MPI_Barrier(comm, e(6))
    if (any(e /= MPI_SUCCESS)) failures = failures + 1
  end subroutine collectives
end program f08_check
